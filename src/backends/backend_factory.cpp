// Backend selection by resource string, libCEED style.
#include "backends/backend.hpp"
#include "backends/cuda_plugin.hpp"
#include "core/error.hpp"

namespace dmuon {

std::unique_ptr<Backend> make_backend(const std::string& resource, MPI_Comm comm) {
  if (resource == "cpu") return make_cpu_backend(comm);
  if (resource.rfind("cuda", 0) == 0 && (resource.size() == 4 || resource[4] == ':'))
    return load_cuda_backend(comm, resource.substr(4));
  if (resource == "auto") {
    // Every rank must pick the same backend: use cuda only if all ranks see a device.
    int mine = cuda_library_sees_device() ? 1 : 0, all = 0;
    require(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) == MPI_SUCCESS, DMUON_ERR_MPI,
            "backend selection: MPI_Allreduce failed");
    return all ? load_cuda_backend(comm, "") : make_cpu_backend(comm);
  }
  fail(DMUON_ERR_UNKNOWN_BACKEND, "unknown backend '" + resource +
                                      "': use \"cpu\", \"cuda\", \"cuda:current\", \"cuda:N\" or \"auto\"");
}

}  // namespace dmuon
