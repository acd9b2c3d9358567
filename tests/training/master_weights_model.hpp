// One small model for the master-weights tests (CPU backend): Adam
// parameters or two Muon matrices (one wide, one tall) of one dtype, with
// updates of about 1e-4 of the parameters per step, below half a bf16 ulp,
// and gradients that are exact in bf16 (so an fp32 twin sees the same ones).
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "dmuon/dmuon.h"

namespace master_weights_test {

constexpr int kSteps = 300;
constexpr double kAdamLr = 1e-4;  // Adam's step is about lr: 1e-4 of |p| ~ 1
constexpr double kMuonLr = 5e-4;  // orthogonalised entries are about 0.2: 1e-4 of |p|

// One bf16 ulp at x.
inline float ulp(float x) { return std::ldexp(1.0f, std::ilogb(x) - 7); }

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
  std::vector<int64_t> numel;

  Model(MPI_Comm comm, int kind_, int dtype_, int master, dmuon_options_t o = DMUON_OPTIONS_INIT)
      : kind(kind_), dtype(dtype_) {
    EXPECT_EQ(dmuon_context_create(comm, "cpu", &ctx), DMUON_SUCCESS);
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

  void* view(int id, bool grad) const {
    void *data = nullptr, *g = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, id, &data, &g), DMUON_SUCCESS);
    return grad ? g : data;
  }
  void set(void* base, int64_t i, float v) const {
    if (dtype == DMUON_DTYPE_FP32)
      static_cast<float*>(base)[i] = v;
    else
      static_cast<uint16_t*>(base)[i] = dmuon::float_to_bf16(v);
  }
  float get(const void* base, int64_t i) const {
    return dtype == DMUON_DTYPE_FP32 ? static_cast<const float*>(base)[i]
                                     : dmuon::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  }

  // Parameters base + (i % 13) / 16: exact in bf16, |p| in [base, base + 0.75].
  void write_params(float base) const {
    for (int id = 0; id < static_cast<int>(numel.size()); ++id)
      for (int64_t i = 0; i < numel[static_cast<std::size_t>(id)]; ++i)
        set(view(id, false), i, base + static_cast<float>(i % 13) * 0.0625f);
  }
  // Gradients of mixed sign, multiples of 1/16 (exact in bf16), the same every step.
  void step(int /*s*/) const {
    for (int id = 0; id < static_cast<int>(numel.size()); ++id)
      for (int64_t i = 0; i < numel[static_cast<std::size_t>(id)]; ++i)
        set(view(id, true), i, static_cast<float>((i * 7 + id * 3) % 11 - 5) * 0.0625f + 0.03125f);
    ASSERT_EQ(dmuon_step(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
  }
  std::vector<float> values() const {
    std::vector<float> out;
    for (int id = 0; id < static_cast<int>(numel.size()); ++id)
      for (int64_t i = 0; i < numel[static_cast<std::size_t>(id)]; ++i) out.push_back(get(view(id, false), i));
    return out;
  }
};

}  // namespace master_weights_test
