// require_kernels_for_device (backends/cuda/cuda_arch_check.cu), compiled into
// this test for sm_75 alone: no GPU of a test machine runs sm_75 machine code
// (it runs on Turing only), so on the machine's device the check must refuse
// with DMUON_ERR_NOT_SUPPORTED and a message naming the device's sm_XY and
// the build's list, as a context would on a GPU its build has no kernels for.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_arch_check.hpp"
#include "core/error.hpp"

TEST(CudaArchCheck, RefusesADeviceItHasNoKernelsFor) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major == 7 && prop.minor == 5) GTEST_SKIP() << "the device is sm_75, the one this test is built for";
  const std::string arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  try {
    dmuon::require_kernels_for_device(0);
    FAIL() << "no error on " << arch << " from a build for sm_75 only";
  } catch (const dmuon::Error& e) {
    EXPECT_EQ(e.status(), DMUON_ERR_NOT_SUPPORTED);
    const std::string message = e.what();
    EXPECT_NE(message.find("no kernels for " + arch), std::string::npos) << message;
    EXPECT_NE(message.find("built for: 75-real"), std::string::npos) << message;
  }
  // The refusal leaves no error behind for the next CUDA call.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}
