// Compiled instead of the CUDA backend's loader when dmuon is built without
// CUDA: the "cuda" resource then answers with a clear status instead of a
// link failure, and "auto" picks the CPU backend.
#include "backends/backend.hpp"
#include "backends/cuda_plugin.hpp"
#include "core/error.hpp"

namespace dmuon {

std::unique_ptr<Backend> load_cuda_backend(MPI_Comm, const std::string&) {
  fail(DMUON_ERR_BACKEND_NOT_COMPILED,
       "the \"cuda\" backend was not compiled into this dmuon build (configure with -DDMUON_ENABLE_CUDA=ON)");
}

bool cuda_library_sees_device() { return false; }

}  // namespace dmuon
