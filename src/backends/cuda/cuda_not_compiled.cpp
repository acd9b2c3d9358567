// Compiled instead of the CUDA backend when dmuon is built without CUDA: the
// "cuda" resource then answers with a clear status instead of a link failure.
#include "backends/backend.hpp"
#include "core/error.hpp"

namespace dmuon {

std::unique_ptr<Backend> make_cuda_backend(MPI_Comm, const std::string&) {
  fail(DMUON_ERR_BACKEND_NOT_COMPILED,
       "the \"cuda\" backend was not compiled into this dmuon build (configure with -DDMUON_ENABLE_CUDA=ON)");
}

bool cuda_device_visible() { return false; }

}  // namespace dmuon
