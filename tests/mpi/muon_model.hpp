// A small mixed model (Muon matrices of every aspect, fp32 and bf16, beside
// Adam parameters) stepped through the library and through the float64
// reference side by side. Shared by the Muon tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "support/reference.hpp"

namespace muon_test {

struct Spec {
  const char* name;
  int kind;
  int dtype;
  std::vector<int64_t> shape;
  double lr_mul = 1.0, wd_mul = 1.0;
};

// Seven matrices: more than any world size tested (1..4) and divisible by none
// but 1; rows < cols, rows > cols and square; two of one shape (batched NS).
inline const std::vector<Spec>& model() {
  static const std::vector<Spec> m = {
      {"w_wide", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {12, 20}},
      {"b_wide", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {12}},
      {"w_tall", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {20, 12}},
      {"w_sq_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {16, 16}},
      {"w_sq", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {16, 16}, 0.5, 2.0},
      {"emb_bf16", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {3, 5}},
      {"w_tall_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {24, 8}},
      {"w_thin", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {6, 30}},
      {"w_wide2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {12, 20}},
      {"gain", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {1}},
  };
  return m;
}

inline int64_t numel(const Spec& s) {
  int64_t n = 1;
  for (auto e : s.shape) n *= e;
  return n;
}
inline std::size_t elem_bytes(int dtype) { return dtype == DMUON_DTYPE_FP32 ? 4 : 2; }

// Gradient of parameter k, element i, on `rank` at `step`.
inline double rank_grad(uint64_t seed, int step, int rank, std::size_t k, int64_t i) {
  return ref::noise(seed, static_cast<uint64_t>(step) * 64 + static_cast<uint64_t>(rank), k, static_cast<uint64_t>(i));
}

// One optimizer on MPI_COMM_WORLD with model() registered and finalized, plus
// its float64 twin (p, Muon momentum, Adam moments).
class Model {
 public:
  explicit Model(const dmuon_options_t& o, uint64_t seed = 11) : opts(o), seed_(seed) {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    dmuon_context_rank(ctx, &rank, &world);
    EXPECT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_SUCCESS);
    for (const Spec& s : model())
      EXPECT_EQ(dmuon_register(opt, s.name, s.kind, s.dtype, static_cast<int>(s.shape.size()), s.shape.data(),
                               s.lr_mul, s.wd_mul, nullptr),
                DMUON_SUCCESS);
    EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    p_.resize(model().size());
    muon_.resize(model().size());
    adam_.resize(model().size());
    // Small parameters, so one bf16 ulp is small beside one Muon update.
    for (std::size_t k = 0; k < model().size(); ++k) {
      const Spec& s = model()[k];
      p_[k].resize(static_cast<std::size_t>(numel(s)));
      for (int64_t i = 0; i < numel(s); ++i) p_[k][i] = ref::round_to(s.dtype, 0.05 * ref::noise(seed, 1000 + k, i));
      ref::store(data(k), s.dtype, p_[k]);
    }
  }
  ~Model() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  void* data(std::size_t k) {
    void* p = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, static_cast<int>(k), &p, nullptr), DMUON_SUCCESS);
    return p;
  }
  void* grad(std::size_t k) {
    void* g = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, static_cast<int>(k), nullptr, &g), DMUON_SUCCESS);
    return g;
  }

  // This rank's gradients of `step` into the library, and their average over
  // ranks (in the storage dtype, as the library averages) into avg. `amp`
  // scales them; parameters in `zero` get zero gradients.
  void write_grads(int step, double amp, const std::set<std::size_t>& zero = {}) {
    avg_.assign(model().size(), {});
    for (std::size_t k = 0; k < model().size(); ++k) {
      const Spec& s = model()[k];
      const int64_t n = numel(s);
      std::vector<double> mine(static_cast<std::size_t>(n)), avg(static_cast<std::size_t>(n), 0.0);
      const double a = zero.count(k) ? 0.0 : amp;
      for (int64_t i = 0; i < n; ++i) {
        mine[i] = ref::round_to(s.dtype, a * rank_grad(seed_, step, rank, k, i));
        for (int r = 0; r < world; ++r) avg[i] += ref::round_to(s.dtype, a * rank_grad(seed_, step, r, k, i));
        avg[i] = ref::round_to(s.dtype, avg[i] / world);
      }
      ref::store(grad(k), s.dtype, mine);
      avg_[k] = avg;
    }
  }

  // Overwrite element i of parameter k's gradient on `on_rank` (and in the average) with v.
  void poison_grad(std::size_t k, int64_t i, int on_rank, double v) {
    const Spec& s = model()[k];
    if (rank == on_rank) {
      std::vector<double> g = ref::load(grad(k), s.dtype, numel(s));
      g[i] = v;
      ref::store(grad(k), s.dtype, g);
    }
    avg_[k][i] = v;  // inf or NaN on one rank makes the average inf or NaN
  }

  // The reference's view of the last gradients: global norm and clip coefficient.
  double ref_norm() const {
    double sumsq = 0.0;
    for (const auto& a : avg_)
      for (double x : a) sumsq += x * x;
    return std::sqrt(sumsq);
  }
  double ref_clip() const {
    const double norm = ref_norm();
    if (opts.max_grad_norm <= 0 || !std::isfinite(norm)) return 1.0;
    return std::min(1.0, opts.max_grad_norm / (norm + 1e-6));
  }

  // The reference starts each step from the library's parameters (so a bf16
  // rounding difference of an earlier step does not carry over); its momentum
  // and moments stay its own.
  void sync_reference_params() {
    for (std::size_t k = 0; k < model().size(); ++k) p_[k] = params(k);
  }

  // One reference step on the last gradients, skipping `no_grad`.
  void reference_step(const std::set<std::size_t>& no_grad = {}) {
    const double clip = ref_clip();
    for (std::size_t k = 0; k < model().size(); ++k) {
      const Spec& s = model()[k];
      if (no_grad.count(k)) continue;
      std::vector<double> g = avg_[k];
      for (double& x : g) x *= clip;
      if (s.kind == DMUON_KIND_MUON)
        ref::muon_step(p_[k], g, muon_[k], s.shape[0], s.shape[1], opts, s.lr_mul, s.wd_mul);
      else
        ref::adamw_step(p_[k], g, adam_[k], opts.adam_lr * s.lr_mul, opts.adam_beta1, opts.adam_beta2, opts.adam_eps,
                        opts.adam_weight_decay * s.wd_mul);
      for (double& x : p_[k]) x = ref::round_to(s.dtype, x);
    }
  }

  // Library parameters against the reference: fp32 to arithmetic differences,
  // bf16 to one storage ulp (a value near a rounding tie may round either way).
  // A NaN must be where the reference has one.
  void expect_matches_reference(const char* what) {
    for (std::size_t k = 0; k < model().size(); ++k) {
      const Spec& s = model()[k];
      const std::vector<double> got = ref::load(data(k), s.dtype, numel(s));
      double worst = 0.0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double want = p_[k][i];
        ASSERT_EQ(std::isnan(got[i]), std::isnan(want)) << s.name << "[" << i << "] " << what;
        if (std::isnan(want)) continue;
        const double tol = s.dtype == DMUON_DTYPE_FP32 ? 2e-6 + 2e-5 * std::fabs(want) : 1e-6 + std::fabs(want) / 128;
        ASSERT_NEAR(got[i], want, tol) << s.name << "[" << i << "] " << what;
        worst = std::max(worst, std::fabs(got[i] - want) / (std::fabs(want) + 1e-3));
      }
      max_rel_error = std::max(max_rel_error, worst);
    }
  }

  // Every rank's bytes of every parameter equal rank 0's.
  void expect_identical_across_ranks() {
    for (std::size_t k = 0; k < model().size(); ++k) {
      const std::size_t bytes = static_cast<std::size_t>(numel(model()[k])) * elem_bytes(model()[k].dtype);
      std::vector<char> mine(bytes), root(bytes);
      std::memcpy(mine.data(), data(k), bytes);
      root = mine;
      MPI_Bcast(root.data(), static_cast<int>(bytes), MPI_CHAR, 0, MPI_COMM_WORLD);
      EXPECT_EQ(std::memcmp(mine.data(), root.data(), bytes), 0) << model()[k].name << " differs from rank 0";
    }
  }

  // Library step plus reference step, then both checks.
  void step_and_check(int step, double amp = 1.0, const std::set<std::size_t>& no_grad = {},
                      const std::set<std::size_t>& zero = {}) {
    write_grads(step, amp, zero);
    for (std::size_t k : no_grad) ASSERT_EQ(dmuon_mark_no_grad(opt, static_cast<int>(k)), DMUON_SUCCESS);
    sync_reference_params();
    ASSERT_EQ(dmuon_step(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    reference_step(no_grad);
    expect_matches_reference(("step " + std::to_string(step)).c_str());
    expect_identical_across_ranks();
  }

  std::vector<double> params(std::size_t k) { return ref::load(data(k), model()[k].dtype, numel(model()[k])); }
  std::vector<char> raw(std::size_t k) {
    const std::size_t bytes = static_cast<std::size_t>(numel(model()[k])) * elem_bytes(model()[k].dtype);
    std::vector<char> v(bytes);
    std::memcpy(v.data(), data(k), bytes);
    return v;
  }

  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  int rank = 0, world = 1;
  dmuon_options_t opts;  // what the reference uses; a test changes it with the library's setters
  double max_rel_error = 0.0;

 private:
  uint64_t seed_;
  std::vector<std::vector<double>> p_, avg_;
  std::vector<ref::MuonState> muon_;
  std::vector<ref::AdamState> adam_;
};

}  // namespace muon_test
