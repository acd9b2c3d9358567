// Replicated parameters: copies initialised differently on different ranks
// are found (dmuon_check_replicas, and every save refuses to write them),
// naming the parameter and two ranks; dmuon_broadcast_params makes them agree.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/replicas.hpp"
#include "dmuon/dmuon.h"

namespace {

struct Replicated {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  int rank = 0, world = 1;
  Replicated() {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    dmuon_context_rank(ctx, &rank, &world);
    EXPECT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
    const int64_t w[2] = {6, 4}, b[1] = {7}, e[2] = {3, 5};
    EXPECT_EQ(dmuon_register(opt, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, w, 1, 1, nullptr), DMUON_SUCCESS);
    EXPECT_EQ(dmuon_register(opt, "bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, b, 1, 1, nullptr), DMUON_SUCCESS);
    EXPECT_EQ(dmuon_register(opt, "emb", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, 2, e, 1, 1, nullptr), DMUON_SUCCESS);
    EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS);
  }
  ~Replicated() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  template <class T>
  T* data(int id) {
    void* p = nullptr;
    EXPECT_EQ(dmuon_param_view(opt, id, &p, nullptr), DMUON_SUCCESS);
    return static_cast<T*>(p);
  }
  // Every parameter from a per-rank seed, as a simulation seeding its RNG by rank would.
  void init_per_rank() {
    for (int i = 0; i < 24; ++i) data<float>(0)[i] = 0.01f * static_cast<float>(i + 100 * rank);
    for (int i = 0; i < 7; ++i) data<float>(1)[i] = 0.5f;  // the same everywhere
    for (int i = 0; i < 15; ++i) data<uint16_t>(2)[i] = static_cast<uint16_t>(0x3f80 + i + rank);
  }
  std::string error() const { return dmuon_context_last_error(ctx); }
};

TEST(Replicas, DifferingCopiesAreNamedAndSavesRefused) {
  Replicated r;
  ASSERT_GE(r.world, 2);
  r.init_per_rank();
  EXPECT_EQ(dmuon_check_replicas(r.opt), DMUON_ERR_REPLICAS_DIFFER);
  // 'bias' agrees; 'emb' is the first that differs; rank 0 holds the
  // smallest hash or the largest, another rank the other.
  const std::string msg = r.error();
  EXPECT_NE(msg.find("'emb'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dmuon_broadcast_params"), std::string::npos) << msg;

  const std::string dir = "replicas_ckpt_np" + std::to_string(r.world);
  if (r.rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(dmuon_checkpoint_save(r.opt, dir.c_str(), 1, nullptr), DMUON_ERR_REPLICAS_DIFFER);
  EXPECT_NE(r.error().find("dmuon_checkpoint_save"), std::string::npos) << r.error();
  EXPECT_FALSE(std::filesystem::exists(dir + "/ckpt_1.h5"));

  // Broadcast from the last rank: every copy (Muon and Adam) takes its values.
  const int root = r.world - 1;
  ASSERT_EQ(dmuon_broadcast_params(r.opt, root), DMUON_SUCCESS) << r.error();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(r.data<float>(0)[i], 0.01f * static_cast<float>(i + 100 * root));
  for (int i = 0; i < 15; ++i) EXPECT_EQ(r.data<uint16_t>(2)[i], static_cast<uint16_t>(0x3f80 + i + root));
  EXPECT_EQ(dmuon_check_replicas(r.opt), DMUON_SUCCESS) << r.error();
  EXPECT_EQ(dmuon_checkpoint_save(r.opt, dir.c_str(), 1, nullptr), DMUON_SUCCESS) << r.error();
}

TEST(Replicas, OneRankDifferingInOneBitIsFound) {
  Replicated r;
  ASSERT_GE(r.world, 2);
  for (int i = 0; i < 7; ++i) r.data<float>(1)[i] = 1.0f;
  if (r.rank == r.world - 1) {
    uint32_t bits;
    std::memcpy(&bits, &r.data<float>(1)[6], 4);
    bits ^= 1u;  // the last element's lowest mantissa bit
    std::memcpy(&r.data<float>(1)[6], &bits, 4);
  }
  EXPECT_EQ(dmuon_check_replicas(r.opt), DMUON_ERR_REPLICAS_DIFFER);
  EXPECT_NE(r.error().find("'bias'"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("rank " + std::to_string(r.world - 1)), std::string::npos) << r.error();
}

TEST(Replicas, BadArguments) {
  Replicated r;
  EXPECT_EQ(dmuon_broadcast_params(r.opt, -1), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_broadcast_params(r.opt, r.world), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_broadcast_params(nullptr, 0), DMUON_ERR_NULL_HANDLE);
  EXPECT_EQ(dmuon_check_replicas(nullptr), DMUON_ERR_NULL_HANDLE);
  dmuon_optimizer_t fresh = nullptr;
  ASSERT_EQ(dmuon_optimizer_create(r.ctx, nullptr, &fresh), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_broadcast_params(fresh, 0), DMUON_ERR_NOT_FINALIZED);
  EXPECT_EQ(dmuon_check_replicas(fresh), DMUON_ERR_NOT_FINALIZED);
  dmuon_optimizer_destroy(&fresh);
}

TEST(Replicas, HashTellsApartEveryOneBitChange) {
  // Lengths around the 32-byte lanes and the tail; every bit flipped once.
  for (std::size_t n : {1u, 7u, 8u, 31u, 32u, 33u, 100u}) {
    std::vector<unsigned char> a(n, 0x5a);
    const uint64_t h = dmuon::replica_hash(a.data(), n);
    for (std::size_t i = 0; i < n * 8; ++i) {
      a[i / 8] ^= static_cast<unsigned char>(1u << (i % 8));
      EXPECT_NE(dmuon::replica_hash(a.data(), n), h) << n << " bytes, bit " << i;
      a[i / 8] ^= static_cast<unsigned char>(1u << (i % 8));
    }
  }
}

}  // namespace
