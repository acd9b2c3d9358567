// The C ABI's contract on bad input: each case returns its own documented
// status, sets a message, and leaves the state as it was.
#include <gtest/gtest.h>

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
  int count() {
    int n = -1;
    dmuon_num_params(opt, &n);
    return n;
  }
};

const int64_t k2d[2] = {4, 3};

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

TEST(Api, RegistrationBadInputLeavesListUnchanged) {
  Ctx c;
  const int64_t neg[2] = {4, -3}, zero[2] = {0, 3}, three[3] = {2, 2, 2};
  EXPECT_EQ(dmuon_register(nullptr, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, 1, 1, nullptr), DMUON_ERR_NULL_HANDLE);
  EXPECT_EQ(dmuon_register(c.opt, nullptr, DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, 1, 1, nullptr), DMUON_ERR_NULL_POINTER);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, nullptr, 1, 1, nullptr), DMUON_ERR_NULL_POINTER);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, neg, 1, 1, nullptr), DMUON_ERR_INVALID_SHAPE);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, zero, 1, 1, nullptr), DMUON_ERR_INVALID_SHAPE);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 0, k2d, 1, 1, nullptr), DMUON_ERR_INVALID_SHAPE);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 9, k2d, 1, 1, nullptr), DMUON_ERR_INVALID_SHAPE);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, 7, 2, k2d, 1, 1, nullptr), DMUON_ERR_INVALID_DTYPE);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, -1, 2, k2d, 1, 1, nullptr), DMUON_ERR_INVALID_DTYPE);
  EXPECT_EQ(dmuon_register(c.opt, "a", 5, DMUON_DTYPE_FP32, 2, k2d, 1, 1, nullptr), DMUON_ERR_INVALID_KIND);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 3, three, 1, 1, nullptr), DMUON_ERR_MUON_NOT_2D);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, -1, 1, nullptr), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_register(c.opt, "", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, 1, 1, nullptr), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(c.count(), 0);
  int id = -1;
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, 1, 1, &id), DMUON_SUCCESS);
  EXPECT_EQ(id, 0);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, 1, 1, nullptr), DMUON_ERR_DUPLICATE_NAME);
  EXPECT_EQ(c.count(), 1);
  EXPECT_NE(std::string(dmuon_context_last_error(c.ctx)).find("'a'"), std::string::npos);
}

TEST(Api, CallOrderIsEnforced) {
  Ctx c;
  void* p = nullptr;
  EXPECT_EQ(dmuon_optimizer_finalize(c.opt), DMUON_ERR_NO_PARAMETERS);
  EXPECT_EQ(dmuon_step(c.opt), DMUON_ERR_NOT_FINALIZED);
  EXPECT_EQ(dmuon_register(c.opt, "a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, 1, 1, nullptr), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_param_view(c.opt, 0, &p, nullptr), DMUON_ERR_NOT_FINALIZED);
  EXPECT_EQ(dmuon_step(c.opt), DMUON_ERR_NOT_FINALIZED);
  EXPECT_EQ(dmuon_optimizer_finalize(c.opt), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_optimizer_finalize(c.opt), DMUON_ERR_ALREADY_FINALIZED);
  EXPECT_EQ(dmuon_register(c.opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, k2d, 1, 1, nullptr), DMUON_ERR_ALREADY_FINALIZED);
  EXPECT_EQ(c.count(), 1);
  EXPECT_EQ(dmuon_param_view(c.opt, 1, &p, nullptr), DMUON_ERR_INVALID_PARAM_ID);
  EXPECT_EQ(dmuon_param_view(c.opt, -1, &p, nullptr), DMUON_ERR_INVALID_PARAM_ID);
  EXPECT_EQ(dmuon_mark_no_grad(c.opt, 3), DMUON_ERR_INVALID_PARAM_ID);
  EXPECT_EQ(dmuon_set_lr(c.opt, 9, 0.1), DMUON_ERR_INVALID_KIND);
  EXPECT_EQ(dmuon_set_lr(c.opt, DMUON_KIND_ADAM, -0.1), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_param_view(c.opt, 0, &p, nullptr), DMUON_SUCCESS);
  EXPECT_NE(p, nullptr);
  int id = -1;
  EXPECT_EQ(dmuon_param_id(c.opt, "a", &id), DMUON_SUCCESS);
  EXPECT_EQ(id, 0);
  EXPECT_EQ(dmuon_param_id(c.opt, "zz", &id), DMUON_ERR_INVALID_PARAM_ID);
  EXPECT_EQ(dmuon_step(c.opt), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_optimizer_destroy(&c.opt), DMUON_SUCCESS);
  EXPECT_EQ(c.opt, nullptr);
  EXPECT_EQ(dmuon_optimizer_destroy(&c.opt), DMUON_SUCCESS);
  EXPECT_EQ(dmuon_step(c.opt), DMUON_ERR_NULL_HANDLE);
}

TEST(Api, WrongHandleTypeIsRefused) {
  Ctx c;
  // A context passed where an optimizer is expected (possible from C by a cast).
  EXPECT_EQ(dmuon_step(reinterpret_cast<dmuon_optimizer_t>(c.ctx)), DMUON_ERR_NULL_HANDLE);
  EXPECT_EQ(dmuon_context_rank(reinterpret_cast<dmuon_context_t>(c.opt), nullptr, nullptr), DMUON_ERR_NULL_HANDLE);
}

}  // namespace
