// The "cuda" backend behind a bench::Run's context, for benchmarks that set
// its Newton-Schulz configuration or read its diagnostics (internal headers:
// only the CUDA benchmarks, built beside the library, include this).
#pragma once
#include "backends/cuda/cuda_backend.hpp"
#include "bench_common.cuh"
#include "core/context.hpp"

namespace bench {

inline dmuon::CudaBackend* backend_of(Run& run) {
  return dynamic_cast<dmuon::CudaBackend*>(reinterpret_cast<dmuon_context_s*>(run.ctx)->backend.get());
}

}  // namespace bench
