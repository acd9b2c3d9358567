// One small model for the master-weights tests, on the CPU backend
// (tests/training) or the CUDA one (tests/gpu): Adam parameters or two Muon
// matrices (one wide, one tall) of one dtype, with updates of about 1e-4 of
// the parameters per step, below half a bf16 ulp, and gradients that are
// exact in bf16 (so an fp32 twin sees the same ones). The checks shared by
// both backends follow the model.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/ckpt_files.hpp"
#include "core/dtype.hpp"
#include "dmuon/dmuon.h"

namespace master_weights_test {

constexpr int kSteps = 300;
constexpr double kAdamLr = 1e-4;  // Adam's step is about lr: 1e-4 of |p| ~ 1
constexpr double kMuonLr = 5e-4;  // orthogonalised entries are about 0.2: 1e-4 of |p|

// One bf16 ulp at x.
inline float ulp(float x) { return std::ldexp(1.0f, std::ilogb(x) - 7); }

// Where the views point: host memory (cpu) or device memory (cuda, whose
// test passes cudaMemcpy wrappers).
struct Backend {
  const char* resource = "cpu";
  void (*to_views)(void* dst, const void* src, std::size_t bytes) = [](void* d, const void* s, std::size_t n) {
    std::memcpy(d, s, n);
  };
  void (*from_views)(void* dst, const void* src, std::size_t bytes) = [](void* d, const void* s, std::size_t n) {
    std::memcpy(d, s, n);
  };
};

struct Shape {
  const char* name;
  int ndim;
  int64_t dims[2];
};
inline std::vector<Shape> shapes(int kind) {
  if (kind == DMUON_KIND_ADAM) return {{"bias", 1, {200, 1}}, {"gain", 2, {3, 5}}};
  return {{"wide", 2, {16, 32}}, {"tall", 2, {32, 16}}};
}

struct Model {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  int kind, dtype;
  Backend backend;
  std::vector<int64_t> numel;

  Model(MPI_Comm comm, int kind_, int dtype_, int master, Backend b = Backend{})
      : kind(kind_), dtype(dtype_), backend(b) {
    EXPECT_EQ(dmuon_context_create(comm, backend.resource, &ctx), DMUON_SUCCESS);
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.master_weights = master;
    o.adam_lr = kAdamLr;
    o.muon_lr = kMuonLr;
    EXPECT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    for (const Shape& s : shapes(kind)) {
      EXPECT_EQ(dmuon_register(opt, s.name, kind, dtype, s.ndim, s.dims, 1.0, 1.0, nullptr), DMUON_SUCCESS)
          << dmuon_context_last_error(ctx);
      numel.push_back(s.ndim == 1 ? s.dims[0] : s.dims[0] * s.dims[1]);
    }
    EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    write_params(0.5f);
  }
  ~Model() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  std::size_t element_bytes() const { return dtype == DMUON_DTYPE_FP32 ? 4 : 2; }
  void* view(int id, bool grad) const {
    void *data = nullptr, *g = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, id, &data, &g), DMUON_SUCCESS);
    return grad ? g : data;
  }
  // Parameter (or gradient) id from values f(i), rounded to the dtype.
  template <class F>
  void fill(int id, bool grad, F&& f) const {
    const int64_t n = numel[static_cast<std::size_t>(id)];
    std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * element_bytes());
    for (int64_t i = 0; i < n; ++i) {
      const float v = f(i);
      if (dtype == DMUON_DTYPE_FP32)
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      else {
        const uint16_t h = dmuon::float_to_bf16(v);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    backend.to_views(view(id, grad), bytes.data(), bytes.size());
  }

  // Parameters base + (i % 13) / 16: exact in bf16, |p| in [base, base + 0.75].
  void write_params(float base) const {
    for (int id = 0; id < static_cast<int>(numel.size()); ++id)
      fill(id, false, [&](int64_t i) { return base + static_cast<float>(i % 13) * 0.0625f; });
  }
  // Gradients of mixed sign, odd multiples of 1/32 (exact in bf16), the same every step.
  void step(int /*s*/) const {
    for (int id = 0; id < static_cast<int>(numel.size()); ++id)
      fill(id, true, [&](int64_t i) { return static_cast<float>((i * 7 + id * 3) % 11 - 5) * 0.0625f + 0.03125f; });
    ASSERT_EQ(dmuon_step(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
  }
  std::vector<float> values() const {
    std::vector<float> out;
    for (int id = 0; id < static_cast<int>(numel.size()); ++id) {
      const int64_t n = numel[static_cast<std::size_t>(id)];
      std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * element_bytes());
      backend.from_views(bytes.data(), view(id, false), bytes.size());
      for (int64_t i = 0; i < n; ++i) {
        float v;
        if (dtype == DMUON_DTYPE_FP32) {
          std::memcpy(&v, bytes.data() + 4 * i, 4);
        } else {
          uint16_t h;
          std::memcpy(&h, bytes.data() + 2 * i, 2);
          v = dmuon::bf16_to_float(h);
        }
        out.push_back(v);
      }
    }
    return out;
  }
};

// The fp32 twin and the bf16 run with and without masters side by side for
// the same gradients; `write_at` >= 0 writes new values into every
// parameter's view (all three runs alike) before that step.
struct Trio {
  Model fp32, master, plain;
  explicit Trio(int kind, Backend b = Backend{}, MPI_Comm comm = MPI_COMM_WORLD)
      : fp32(comm, kind, DMUON_DTYPE_FP32, 0, b), master(comm, kind, DMUON_DTYPE_BF16, 1, b),
        plain(comm, kind, DMUON_DTYPE_BF16, 0, b) {}
  void run(int steps, int write_at = -1) {
    for (int s = 0; s < steps; ++s) {
      if (s == write_at)
        for (Model* r : {&fp32, &master, &plain}) r->write_params(0.75f);
      for (Model* r : {&fp32, &master, &plain}) r->step(s);
    }
  }
};

// With masters the bf16 parameter is the fp32 one rounded: `exact` (the same
// IEEE operations on both, as on the CPU) or within one bf16 ulp (the CUDA
// kernels of the two dtypes may contract to FMA differently). Without, every
// update was below half an ulp and nothing moved.
inline void expect_tracks_fp32(const Trio& t, const std::vector<float>& initial, int min_moved_ulps, bool exact) {
  const std::vector<float> f = t.fp32.values(), m = t.master.values(), p = t.plain.values();
  int moved = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (exact) ASSERT_EQ(dmuon::float_to_bf16(m[i]), dmuon::float_to_bf16(f[i])) << "element " << i;
    ASSERT_LE(std::fabs(m[i] - f[i]), ulp(f[i])) << "element " << i;
    ASSERT_EQ(p[i], initial[i]) << "element " << i << " moved without master weights";
    if (std::fabs(f[i] - initial[i]) >= min_moved_ulps * ulp(initial[i])) ++moved;
  }
  // The updates added up to several ulps on most elements: the test measures something.
  EXPECT_GE(moved, static_cast<int>(f.size()) / 2);
}

// The first n ranks of the world (MPI_COMM_NULL on the others).
inline MPI_Comm first_ranks(int n) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &c);
  return c;
}

// Saved halfway on the first `savers` ranks, restored on the first
// `restorers`: the rest of the run equals the uninterrupted one on the
// restorers bit for bit. Without the masters in the file the restored run
// would start from the rounded parameters and end elsewhere.
inline void resume_across(int savers, int restorers, int kind, Backend b = Backend{}) {
  const std::string dir = ckpt_test::fresh_dir(std::string("master_weights_") + b.resource + "_" + std::to_string(kind) +
                                               "_" + std::to_string(savers) + "to" + std::to_string(restorers));
  MPI_Comm save_comm = first_ranks(savers), restore_comm = first_ranks(restorers);
  std::vector<float> reference;
  if (restore_comm != MPI_COMM_NULL) {
    Model uninterrupted(restore_comm, kind, DMUON_DTYPE_BF16, 1, b);
    for (int s = 0; s < kSteps; ++s) uninterrupted.step(s);
    reference = uninterrupted.values();
  }
  if (save_comm != MPI_COMM_NULL) {
    Model first_half(save_comm, kind, DMUON_DTYPE_BF16, 1, b);
    for (int s = 0; s < kSteps / 2; ++s) first_half.step(s);
    EXPECT_EQ(dmuon_checkpoint_save(first_half.opt, dir.c_str(), kSteps / 2, nullptr), DMUON_SUCCESS)
        << dmuon_context_last_error(first_half.ctx);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (restore_comm != MPI_COMM_NULL) {
    Model second_half(restore_comm, kind, DMUON_DTYPE_BF16, 1, b);
    int64_t user_step = -1;
    EXPECT_EQ(dmuon_checkpoint_restore(second_half.opt, dir.c_str(), &user_step), DMUON_SUCCESS)
        << dmuon_context_last_error(second_half.ctx);
    EXPECT_EQ(user_step, kSteps / 2);
    for (int s = kSteps / 2; s < kSteps; ++s) second_half.step(s);
    EXPECT_EQ(second_half.values(), reference) << savers << " to " << restorers << " ranks, kind " << kind;
  }
  for (MPI_Comm* c : {&save_comm, &restore_comm})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

}  // namespace master_weights_test
