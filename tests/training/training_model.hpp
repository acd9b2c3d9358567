// A small model for the training-feature tests (accumulation, schedules,
// metrics): two Muon matrices and two AdamW vectors, fp32, on the CPU
// backend, with deterministic per-rank gradients.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support/reference.hpp"

namespace training {

struct Spec {
  const char* name;
  int kind;
  std::vector<int64_t> shape;
};

inline const std::vector<Spec>& model() {
  static const std::vector<Spec> m = {
      {"w0", DMUON_KIND_MUON, {6, 4}},
      {"w1", DMUON_KIND_MUON, {5, 5}},
      {"b0", DMUON_KIND_ADAM, {6}},
      {"b1", DMUON_KIND_ADAM, {3, 2}},
  };
  return m;
}

inline int64_t numel(const Spec& s) {
  int64_t n = 1;
  for (int64_t e : s.shape) n *= e;
  return n;
}

struct Model {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  int rank = 0, world = 1;
  explicit Model(const dmuon_options_t& o, MPI_Comm comm = MPI_COMM_WORLD) {
    EXPECT_EQ(dmuon_context_create(comm, "cpu", &ctx), DMUON_SUCCESS);
    dmuon_context_rank(ctx, &rank, &world);
    EXPECT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_SUCCESS);
    for (const Spec& s : model())
      EXPECT_EQ(dmuon_register(opt, s.name, s.kind, DMUON_DTYPE_FP32, static_cast<int>(s.shape.size()),
                               s.shape.data(), 1.0, 1.0, nullptr),
                DMUON_SUCCESS);
    EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    // The same start on every rank and in every run.
    for (std::size_t k = 0; k < model().size(); ++k)
      for (int64_t i = 0; i < numel(model()[k]); ++i) data(k)[i] = static_cast<float>(ref::noise(3, k, i));
  }
  ~Model() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  float* data(std::size_t k) {
    void* p = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, static_cast<int>(k), &p, nullptr), DMUON_SUCCESS);
    return static_cast<float*>(p);
  }
  float* grad(std::size_t k) {
    void* g = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, static_cast<int>(k), nullptr, &g), DMUON_SUCCESS);
    return static_cast<float*>(g);
  }
  std::vector<float> params() {
    std::vector<float> all;
    for (std::size_t k = 0; k < model().size(); ++k) {
      const float* p = data(k);
      all.insert(all.end(), p, p + numel(model()[k]));
    }
    return all;
  }
};

// The gradient of one micro-batch on one rank: a pull towards a target that
// depends on (step, micro-batch, rank), so ranks and micro-batches differ.
inline double micro_grad(double param, int step, int micro, int rank, std::size_t k, int64_t i) {
  return param - ref::noise(11, static_cast<uint64_t>(step * 64 + micro * 8 + rank), k, static_cast<uint64_t>(i));
}

// A fresh directory made by rank 0 (/tmp/<prefix>XXXXXX), named on every
// rank; "" when it could not be made.
inline std::string shared_temp_dir(const char* prefix) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char dir[256] = "";
  if (rank == 0) {
    std::snprintf(dir, sizeof dir, "/tmp/%sXXXXXX", prefix);
    if (!mkdtemp(dir)) dir[0] = '\0';
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

}  // namespace training
