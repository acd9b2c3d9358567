// Sizes at the edges of 64-bit arithmetic: a shape whose own sizes cannot be
// represented is INVALID_SHAPE at registration; parameters that fit one by
// one but not together, or storage no machine has, are OUT_OF_MEMORY at
// finalize, and the optimizer stays unfinalized. (Before these checks the
// byte and padding arithmetic wrapped: finalize succeeded with a few hundred
// bytes, or none, and a step wrote out of bounds.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dmuon/dmuon.h"

namespace {

constexpr int64_t k31 = int64_t{1} << 31;
constexpr int64_t k53 = int64_t{1} << 53;
constexpr int64_t k60 = int64_t{1} << 60;
constexpr int64_t k61 = int64_t{1} << 61;
constexpr int64_t k62 = int64_t{1} << 62;

struct Fixture {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  Fixture() {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    EXPECT_EQ(dmuon_optimizer_create(ctx, nullptr, &opt), DMUON_SUCCESS);
  }
  ~Fixture() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  int reg(const std::string& name, int kind, int dtype, std::vector<int64_t> shape) {
    return dmuon_register(opt, name.c_str(), kind, dtype, static_cast<int>(shape.size()), shape.data(), 1.0, 1.0,
                          nullptr);
  }
  // A failed finalize leaves the optimizer unfinalized, with a message.
  void expect_finalize_refused(int status, const char* words) {
    EXPECT_EQ(dmuon_optimizer_finalize(opt), status);
    EXPECT_NE(std::string(dmuon_context_last_error(ctx)).find(words), std::string::npos)
        << dmuon_context_last_error(ctx);
    EXPECT_EQ(dmuon_param_view(opt, 0, nullptr, nullptr), DMUON_ERR_NOT_FINALIZED);
  }
};

TEST(Sizes, ShapesWhoseSizesDoNotFitAreRefusedAtRegister) {
  Fixture f;
  const std::vector<std::vector<int64_t>> refused = {
      {k62}, {k61}, {INT64_MAX}, {INT64_MAX - 3}, {k31, k31}, {k31, k31, 2}, {INT64_MAX, 2}, {k53, 1024}};
  for (int dtype : {DMUON_DTYPE_FP32, DMUON_DTYPE_BF16})
    for (const auto& shape : refused) {
      const int kind = shape.size() == 2 ? DMUON_KIND_MUON : DMUON_KIND_ADAM;
      EXPECT_EQ(f.reg("p", kind, dtype, shape), DMUON_ERR_INVALID_SHAPE) << shape[0] << " x ... dtype " << dtype;
      EXPECT_NE(std::string(dmuon_context_last_error(f.ctx)).find("element count"), std::string::npos);
    }
  int count = -1;
  EXPECT_EQ(dmuon_num_params(f.opt, &count), DMUON_SUCCESS);
  EXPECT_EQ(count, 0);  // nothing was added
  // The largest accepted sizes register (whether they can be allocated is finalize's question).
  EXPECT_EQ(f.reg("a", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {k31}), DMUON_SUCCESS);
  EXPECT_EQ(f.reg("b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {k53}), DMUON_SUCCESS);
  EXPECT_EQ(f.reg("c", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {k31, k31 / 4}), DMUON_SUCCESS);
  int64_t numel = 0;
  EXPECT_EQ(dmuon_param_numel(f.opt, 2, &numel), DMUON_SUCCESS);
  EXPECT_EQ(numel, k60);
}

TEST(Sizes, StorageNoMachineHasIsOutOfMemoryAtFinalize) {
  Fixture f;
  ASSERT_EQ(f.reg("b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {k53}), DMUON_SUCCESS);
  f.expect_finalize_refused(DMUON_ERR_OUT_OF_MEMORY, "");
}

TEST(Sizes, AdamParametersThatOverflowTogetherAreOutOfMemory) {
  // Each fits; their sum (and its bytes) does not: the padded end of the
  // flat buffer would wrap.
  for (int dtype : {DMUON_DTYPE_FP32, DMUON_DTYPE_BF16}) {
    Fixture f;
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(f.reg("b" + std::to_string(i), DMUON_KIND_ADAM, dtype, {k60}), DMUON_SUCCESS);
    f.expect_finalize_refused(DMUON_ERR_OUT_OF_MEMORY, "storage would exceed");
  }
}

TEST(Sizes, AdamParameterPaddedPastTheLimitIsOutOfMemory) {
  Fixture f;
  ASSERT_EQ(f.reg("small", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {1}), DMUON_SUCCESS);
  // Fits alone, but starts after the first parameter's 16-element padding.
  ASSERT_EQ(f.reg("edge", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {INT64_MAX / 4 - 64}), DMUON_SUCCESS);
  f.expect_finalize_refused(DMUON_ERR_OUT_OF_MEMORY, "'edge'");
}

TEST(Sizes, MuonSegmentsThatOverflowTogetherAreOutOfMemory) {
  Fixture f;
  int world = 1;
  dmuon_context_rank(f.ctx, nullptr, &world);
  // Three matrices of 2^60 elements: on one rank their segment overflows; on
  // two or more, the owner-major buffer of world equal segments does.
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(f.reg("w" + std::to_string(i), DMUON_KIND_MUON, DMUON_DTYPE_BF16, {k31, k31 / 4}), DMUON_SUCCESS);
  f.expect_finalize_refused(DMUON_ERR_OUT_OF_MEMORY, "would exceed");
}

}  // namespace
