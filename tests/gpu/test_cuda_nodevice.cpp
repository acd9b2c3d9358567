// Without a visible device (run with CUDA_VISIBLE_DEVICES empty) the "cuda"
// resource fails with DMUON_ERR_NO_DEVICE and a message that says why, and
// "auto" falls back to the CPU backend. Runs on every machine, GPU or not.
#include <gtest/gtest.h>

#include <string>

#include "dmuon/dmuon.h"

TEST(CudaNoDevice, CudaIsRefusedClearlyAndAutoPicksCpu) {
  dmuon_context_t ctx = nullptr;
  EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cuda", &ctx), DMUON_ERR_NO_DEVICE);
  EXPECT_EQ(ctx, nullptr);
  const std::string msg = dmuon_context_last_error(nullptr);
  EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
  ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "auto", &ctx), DMUON_SUCCESS) << dmuon_context_last_error(nullptr);
  char name[16] = {};
  ASSERT_EQ(dmuon_context_backend(ctx, name, sizeof name), DMUON_SUCCESS);
  EXPECT_STREQ(name, "cpu");
  dmuon_context_destroy(&ctx);
}

// The device part of the resource string: bad syntax is its own status, and
// every form that names a device is refused clearly when none is visible.
TEST(CudaNoDevice, DeviceSpecsAreCheckedBeforeTheDevices) {
  dmuon_context_t ctx = nullptr;
  for (const char* bad : {"cuda:", "cuda:abc", "cuda:-1", "cuda:1x", "cuda:9999999"}) {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, bad, &ctx), DMUON_ERR_UNKNOWN_BACKEND) << bad;
    EXPECT_EQ(ctx, nullptr);
    const std::string msg = dmuon_context_last_error(nullptr);
    EXPECT_NE(msg.find("cuda:current"), std::string::npos) << bad << ": " << msg;
  }
  for (const char* named : {"cuda:0", "cuda:3", "cuda:current"}) {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, named, &ctx), DMUON_ERR_NO_DEVICE) << named;
    EXPECT_EQ(ctx, nullptr);
  }
}
