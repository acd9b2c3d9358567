// CUDA, cuBLAS and NCCL results turned into dmuon::Error(DMUON_ERR_CUDA) with
// the library's own error text, so every failure reaches the caller's status
// and the context's last-error message (the library never prints).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/error.hpp"

namespace dmuon {

inline void cuda_check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  fail(DMUON_ERR_CUDA, std::string(what) + ": " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc));
}

inline void cublas_check(cublasStatus_t rc, const char* what) {
  if (rc == CUBLAS_STATUS_SUCCESS) return;
  fail(DMUON_ERR_CUDA, std::string(what) + ": " + cublasGetStatusName(rc) + ": " + cublasGetStatusString(rc));
}

inline void nccl_check(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  fail(DMUON_ERR_CUDA, std::string(what) + ": " + ncclGetErrorString(rc));
}

// A kernel launch has no result of its own: ask for the launch error.
inline void launch_check(const char* kernel) { cuda_check(cudaGetLastError(), kernel); }

}  // namespace dmuon
