#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/cuda_arch_check.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_pdl.cuh"

namespace dmuon {
namespace {
// Compiled for the same architectures as every other kernel of the library:
// whether the runtime finds an image of it for a device (machine code for its
// architecture, or PTX it can compile) answers for all of them.
__global__ void probe_kernel() { await_prerequisite_kernels(); }
}  // namespace

void require_kernels_for_device(int device) {
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int current = -1;
  cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device) cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cudaFuncAttributes attr{};
  const cudaError_t rc = cudaFuncGetAttributes(&attr, probe_kernel);
  if (current != device) cudaSetDevice(current);
  if (rc == cudaErrorNoKernelImageForDevice || rc == cudaErrorInvalidDeviceFunction ||
      rc == cudaErrorUnsupportedPtxVersion) {
    cudaGetLastError();  // the query's error is answered here, not by a later call
    fail(DMUON_ERR_NOT_SUPPORTED, "this dmuon build has no kernels for sm_" + std::to_string(prop.major) +
                                      std::to_string(prop.minor) + " (device " + std::to_string(device) + ", " +
                                      prop.name + "; built for: " DMUON_CUDA_ARCHITECTURES
                                      "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=" +
                                      std::to_string(prop.major) + std::to_string(prop.minor));
  }
  cuda_check(rc, "cudaFuncGetAttributes (kernel image check)");
}

}  // namespace dmuon
