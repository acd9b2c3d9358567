// Which GPU each rank of the "cuda" backend runs on (cuda_device.hpp).
#include <cuda_runtime.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "core/error.hpp"

namespace dmuon {

int node_local_rank(MPI_Comm comm) {
  // Launchers export the node-local rank among the world's ranks; reading it
  // involves no other rank, where a split of MPI_COMM_WORLD would wait for
  // every rank of the world, also those that never create this context.
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                           "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID", "SLURM_LOCALID"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long local = std::strtol(v, &end, 10);
    if (*end == '\0' && local >= 0 && local < (1L << 20)) return static_cast<int>(local);
  }
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS) return 0;
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
}

namespace {

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// Every rank learns whether any rank has a problem, so that all of them fail
// together instead of leaving some in the next collective. `status` is this
// rank's (0: none); the largest status wins on the ranks without a problem.
void agree(MPI_Comm comm, int rank, int status, const std::string& problem) {
  int worst = 0;
  require(MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, comm) == MPI_SUCCESS, DMUON_ERR_MPI,
          "cuda backend: MPI_Allreduce failed while choosing the device");
  if (status) fail(status, "the \"cuda\" backend on rank " + std::to_string(rank) + ": " + problem);
  if (worst) fail(worst, "the \"cuda\" backend: another rank could not use its GPU (see that rank's message)");
}

}  // namespace

bool cuda_sharing_allowed() {
  const char* v = std::getenv("DMUON_CUDA_SHARE_GPU");
  return v && std::strcmp(v, "1") == 0;
}

CudaDeviceChoice choose_cuda_device(MPI_Comm comm, const std::string& spec) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const int local_rank = node_local_rank(comm);

  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  CudaDeviceChoice choice;
  int status = 0;
  std::string problem;
  // spec: "", ":current" or ":N" (cuda_device.hpp); `which` is its part after the colon.
  const std::string which = spec.empty() ? "" : spec.substr(1);
  if (!spec.empty() && (spec[0] != ':' || (which != "current" && !all_digits(which)))) {
    status = DMUON_ERR_UNKNOWN_BACKEND;
    problem = "unknown device \"cuda" + spec + "\": use \"cuda\", \"cuda:current\" or \"cuda:N\"";
  } else if (rc != cudaSuccess || devices == 0) {
    cudaGetLastError();
    status = DMUON_ERR_NO_DEVICE;
    problem = std::string("no CUDA device is visible (") + (rc == cudaSuccess ? "device count 0" : cudaGetErrorString(rc)) + ")";
  } else if (spec.empty()) {
    choice.device = local_rank % devices;
    choice.make_current = true;
  } else if (which == "current") {
    if (cudaGetDevice(&choice.device) != cudaSuccess) {
      cudaGetLastError();
      status = DMUON_ERR_NO_DEVICE;
      problem = "\"cuda:current\": cudaGetDevice failed";
    }
  } else {
    choice.device = std::atoi(which.c_str());
    choice.make_current = true;
    if (choice.device >= devices) {
      status = DMUON_ERR_NO_DEVICE;
      problem = "\"cuda" + spec + "\": there is no device " + which + " (" + std::to_string(devices) +
                " visible, numbered from 0)";
    }
  }
  agree(comm, rank, status, problem);

  // Ranks on one GPU: NCCL refuses them (it finds the same device twice on a
  // host), so refuse them first with a message that says what to do, unless
  // the run opted in (tests and debugging: docs/guide/backends.md).
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, choice.device) != cudaSuccess) {
    cudaGetLastError();
    status = DMUON_ERR_NO_DEVICE;
    problem = "cudaGetDeviceProperties(" + std::to_string(choice.device) + ") failed";
  }
  agree(comm, rank, status, problem);
  std::vector<char> uuids(static_cast<std::size_t>(world) * sizeof prop.uuid.bytes);
  require(MPI_Allgather(prop.uuid.bytes, sizeof prop.uuid.bytes, MPI_BYTE, uuids.data(), sizeof prop.uuid.bytes,
                        MPI_BYTE, comm) == MPI_SUCCESS,
          DMUON_ERR_MPI, "cuda backend: MPI_Allgather of the device ids failed");
  int shared_with = -1;
  for (int r = 0; r < world && shared_with < 0; ++r)
    if (r != rank && std::memcmp(&uuids[static_cast<std::size_t>(r) * sizeof prop.uuid.bytes], prop.uuid.bytes,
                                 sizeof prop.uuid.bytes) == 0)
      shared_with = r;
  choice.shared = shared_with >= 0;
  if (choice.shared && !cuda_sharing_allowed()) {
    status = DMUON_ERR_NO_DEVICE;
    problem = "ranks " + std::to_string(std::min(rank, shared_with)) + " and " + std::to_string(std::max(rank, shared_with)) +
              " would share GPU " + std::to_string(choice.device) + " (" + prop.name +
              "); NCCL needs one rank per GPU. Start at most one rank per visible GPU, give each rank its own "
              "device (\"cuda:N\"), or, for tests only, set DMUON_CUDA_SHARE_GPU=1 and a distinct NCCL_HOSTID per rank";
  }
  agree(comm, rank, status, problem);
  return choice;
}

}  // namespace dmuon
