// Helpers of the gpu tests: a model (list of parameters) registered on a
// context of a given backend, gradients written from host vectors, and
// parameters read back, whatever memory the backend uses.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dmuon/dmuon.h"
#include "support/param_spec.hpp"
#include "support/reference.hpp"

namespace gputest {

using Spec = dmuon_test::ParamSpec;

// Deterministic gradient of parameter k at step s (test data, not a result).
inline double grad_value(int step, int k, int64_t i, double scale = 1.0) { return scale * ref::noise(11, step, k, i); }
inline double init_value(int k, int64_t i) { return 0.5 * ref::noise(5, 0, k, i); }

inline int rank_in(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
inline int size_of(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

// What rank `rank` of `world` contributes for a gradient value g: twice g on
// even ranks and nothing on odd ones when the world is even, g itself
// otherwise. The ranks then differ, and their average is g exactly (a power
// of two scales every dtype without rounding), so each test compares with the
// same reference whatever the number of ranks.
inline double rank_share(double g, int rank, int world) {
  if (world % 2) return g;
  return rank % 2 ? 0.0 : 2.0 * g;
}

struct Model {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  std::vector<Spec> specs;
  bool device = false;
  MPI_Comm comm;

  // On MPI_COMM_WORLD unless a test checks something each rank does alone.
  Model(const char* backend, const std::vector<Spec>& s, const dmuon_options_t& o, MPI_Comm c = MPI_COMM_WORLD)
      : specs(s), comm(c) {
    EXPECT_EQ(dmuon_context_create(comm, backend, &ctx), DMUON_SUCCESS) << dmuon_context_last_error(nullptr);
    char name[16] = {};
    dmuon_context_backend(ctx, name, sizeof name);
    device = std::string(name) == "cuda";
    EXPECT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    for (const Spec& p : specs)
      EXPECT_EQ(dmuon_register(opt, p.name.c_str(), p.kind, p.dtype, static_cast<int>(p.shape.size()), p.shape.data(),
                               1.0, 1.0, nullptr),
                DMUON_SUCCESS)
          << dmuon_context_last_error(ctx);
    EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
  }
  ~Model() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  void* ptr(int k, bool grad) {
    void *d = nullptr, *g = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, k, &d, &g), DMUON_SUCCESS);
    return grad ? g : d;
  }
  void put(int k, bool grad, const std::vector<double>& v) {
    std::vector<char> host(specs[k].bytes());
    ref::store(host.data(), specs[k].dtype, v);
    if (device) {
      // The optimizer's streams do not synchronise with the legacy stream, and
      // a pageable copy may return before its DMA lands: wait for it.
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(ptr(k, grad), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    else
      std::memcpy(ptr(k, grad), host.data(), host.size());
  }
  std::vector<char> raw(int k) {
    std::vector<char> host(specs[k].bytes());
    if (device) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(host.data(), ptr(k, false), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    } else {
      std::memcpy(host.data(), ptr(k, false), host.size());
    }
    return host;
  }
  std::vector<double> get(int k) {
    std::vector<char> r = raw(k);
    return ref::load(r.data(), specs[k].dtype, specs[k].numel());
  }
  void init() {
    for (std::size_t k = 0; k < specs.size(); ++k) {
      std::vector<double> v(static_cast<std::size_t>(specs[k].numel()));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = ref::round_to(specs[k].dtype, init_value(int(k), int64_t(i)));
      put(int(k), false, v);
    }
  }
  // Writes this rank's share of step s's gradients (rank_share) and returns
  // their average over the ranks (rounded to the dtype), which the step uses.
  std::vector<std::vector<double>> grads(int step, double scale = 1.0) {
    std::vector<std::vector<double>> all;
    const int rank = rank_in(comm), world = size_of(comm);
    for (std::size_t k = 0; k < specs.size(); ++k) {
      std::vector<double> g(static_cast<std::size_t>(specs[k].numel())), mine(g.size());
      for (std::size_t i = 0; i < g.size(); ++i) {
        g[i] = ref::round_to(specs[k].dtype, grad_value(step, int(k), int64_t(i), scale));
        mine[i] = rank_share(g[i], rank, world);
      }
      put(int(k), true, mine);
      all.push_back(std::move(g));
    }
    return all;
  }
  // Newton-Schulz batches this rank runs: its owned Muon matrices, one batch
  // per (dtype, shape).
  int owned_batches() {
    std::set<std::tuple<int, int64_t, int64_t>> batches;
    for (std::size_t k = 0; k < specs.size(); ++k) {
      int owner = -1;
      EXPECT_EQ(dmuon_param_owner(opt, int(k), &owner), DMUON_SUCCESS);
      if (specs[k].kind == DMUON_KIND_MUON && owner == rank_in(comm))
        batches.insert({specs[k].dtype, specs[k].shape[0], specs[k].shape[1]});
    }
    return static_cast<int>(batches.size());
  }
};

// Largest |a - b| over max(|b|, floor), for reporting and tolerance checks.
inline double max_rel(const std::vector<double>& a, const std::vector<double>& b, double floor) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
  return worst;
}

}  // namespace gputest
