// The C ABI's contract on bad input: each case returns its own documented
// status, sets a message, and leaves the state as it was.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "dmuon/dmuon.h"

namespace {

struct Ctx {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  Ctx() {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    EXPECT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
  }
  ~Ctx() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
};

TEST(Api, VersionAndErrorStrings) {
  int ma = -1, mi = -1, pa = -1;
  EXPECT_EQ(dmuon_get_version(&ma, &mi, &pa), DMUON_SUCCESS);
  EXPECT_EQ(ma, DMUON_VERSION_MAJOR);
  EXPECT_EQ(mi, DMUON_VERSION_MINOR);
  EXPECT_EQ(DMUON_CHECK_VERSION(), DMUON_SUCCESS);
  EXPECT_NE(dmuon_check_version(DMUON_VERSION_MAJOR + 1, 0, 0), DMUON_SUCCESS);
  // Every code has its own text.
  for (int a = 0; a < DMUON_STATUS_COUNT; ++a)
    for (int b = a + 1; b < DMUON_STATUS_COUNT; ++b)
      EXPECT_STRNE(dmuon_error_string(a), dmuon_error_string(b));
  EXPECT_STREQ(dmuon_error_string(-5), "unknown status");
  EXPECT_STREQ(dmuon_error_string(DMUON_STATUS_COUNT), "unknown status");
}

TEST(Api, ContextBadInput) {
  dmuon_context_t ctx = nullptr;
  EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "tpu", &ctx), DMUON_ERR_UNKNOWN_BACKEND);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(dmuon_context_last_error(nullptr)).find("tpu"), std::string::npos);
  EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, nullptr, &ctx), DMUON_ERR_NULL_POINTER);
  EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", nullptr), DMUON_ERR_NULL_POINTER);
  EXPECT_EQ(dmuon_context_create(MPI_COMM_NULL, "cpu", &ctx), DMUON_ERR_INVALID_VALUE);
#ifndef DMUON_TEST_HAS_GPU
  // Without a visible GPU (or without CUDA compiled in) "cuda" is a clear status.
  const int rc = dmuon_context_create(MPI_COMM_WORLD, "cuda", &ctx);
  EXPECT_TRUE(rc == DMUON_ERR_BACKEND_NOT_COMPILED || rc == DMUON_ERR_NO_DEVICE) << rc;
  EXPECT_EQ(ctx, nullptr);
#endif
  EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "auto", &ctx), DMUON_SUCCESS);
  char name[16];
  EXPECT_EQ(dmuon_context_backend(ctx, name, sizeof name), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_context_backend(ctx, name, 2), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_context_destroy(&ctx), DMUON_SUCCESS);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(dmuon_context_destroy(&ctx), DMUON_SUCCESS);  // double destroy is harmless
  EXPECT_EQ(dmuon_context_destroy(nullptr), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_context_rank(nullptr, nullptr, nullptr), DMUON_ERR_NULL_HANDLE);
  EXPECT_EQ(dmuon_optimizer_create(nullptr, nullptr, nullptr), DMUON_ERR_NULL_HANDLE);
}

TEST(Api, OptionsAreValidated) {
  Ctx c;
  dmuon_optimizer_t opt = nullptr;
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.magic = 0;
  EXPECT_EQ(dmuon_optimizer_create(c.ctx, &o, &opt), DMUON_ERR_OPTIONS_VERSION);
  o = DMUON_OPTIONS_INIT;
  o.adam_beta2 = 1.0;
  EXPECT_EQ(dmuon_optimizer_create(c.ctx, &o, &opt), DMUON_ERR_INVALID_VALUE);
  o = DMUON_OPTIONS_INIT;
  o.muon_ns_schedule = 9;
  EXPECT_EQ(dmuon_optimizer_create(c.ctx, &o, &opt), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(opt, nullptr);
  EXPECT_EQ(dmuon_optimizer_create(c.ctx, &o, nullptr), DMUON_ERR_NULL_POINTER);
}

TEST(Api, OptionsOfAnOlderLayoutTakeTheNewerFieldsDefaults) {
  Ctx c;
  // A caller compiled against version 1 of dmuon.h: its struct ends at
  // cuda_stream, and whatever lies beyond is not its own.
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.version = 1;
  o.struct_size = offsetof(dmuon_options_t, cuda_stream) + sizeof(void*);
  o.adam_lr = 0.25;
  o.muon_ns_symmetric = 77;
  o.restore_gather = 77;
  dmuon_optimizer_t opt = nullptr;
  ASSERT_EQ(dmuon_optimizer_create(c.ctx, &o, &opt), DMUON_SUCCESS) << dmuon_context_last_error(c.ctx);
  dmuon_options_t got;
  EXPECT_EQ(dmuon_get_options(opt, &got), DMUON_SUCCESS);
  EXPECT_EQ(got.adam_lr, 0.25);
  EXPECT_EQ(got.muon_ns_symmetric, DMUON_NS_SYMMETRIC_AUTO);
  EXPECT_EQ(got.restore_gather, 0);
  EXPECT_EQ(got.version, static_cast<uint32_t>(DMUON_OPTIONS_VERSION));
  EXPECT_EQ(got.struct_size, sizeof got);
  dmuon_optimizer_destroy(&opt);
}

TEST(Api, OptionMessagesNameTheField) {
  Ctx c;
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_ns_symmetric = 3;
  dmuon_optimizer_t opt = nullptr;
  EXPECT_EQ(dmuon_optimizer_create(c.ctx, &o, &opt), DMUON_ERR_INVALID_VALUE);
  EXPECT_NE(std::string(dmuon_context_last_error(c.ctx)).find("muon_ns_symmetric must be"), std::string::npos);
  o = DMUON_OPTIONS_INIT;
  o.version = DMUON_OPTIONS_VERSION + 1;
  EXPECT_EQ(dmuon_optimizer_create(c.ctx, &o, &opt), DMUON_ERR_OPTIONS_VERSION);
  EXPECT_NE(std::string(dmuon_context_last_error(c.ctx)).find("newer"), std::string::npos);
}

// Registration, call order, wrong handle types and every other function's bad
// input: the matrix in tests/hardening/test_bad_input.cpp (moved from here).

}  // namespace
