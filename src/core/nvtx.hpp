// NVTX ranges around the step's phases, for Nsight Systems. Built with CUDA
// (DMUON_HAVE_NVTX, set by src/backends/cuda/CMakeLists.txt) they use the
// toolkit's header-only NVTX 3, which costs a test of a null pointer when no
// profiler is attached; otherwise, and in the CPU-only build, nothing.
#pragma once

#if defined(DMUON_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace dmuon {

// A range from construction to the end of the scope; names are literals.
class NvtxRange {
 public:
#if defined(DMUON_HAVE_NVTX)
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
#else
  explicit NvtxRange(const char*) {}
#endif
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace dmuon
