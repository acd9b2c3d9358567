// Which GPU each rank of the "cuda" backend runs on. The resource string
// says how: "cuda" maps the node-local rank (among MPI_COMM_WORLD's ranks)
// onto the visible devices and makes that device current; "cuda:N" takes
// device N and makes it current; "cuda:current" takes the device the calling
// thread already has current (set by the simulation, OpenACC, ...) and
// changes nothing. Collective over the communicator: a problem on any rank
// (no device, an index out of range, two ranks on one GPU without the
// opt-in) fails every rank with a status, so none waits in the NCCL bootstrap.
#pragma once
#include <mpi.h>

#include <string>

namespace dmuon {

struct CudaDeviceChoice {
  int device = 0;
  bool make_current = false;  // the resource asked dmuon to select the device for the thread
  bool shared = false;        // another rank of the communicator runs on the same GPU
};

// spec: what follows "cuda" in the resource string ("", ":current", ":N").
CudaDeviceChoice choose_cuda_device(MPI_Comm comm, const std::string& spec);

// This process's rank among the ranks of MPI_COMM_WORLD on its node, the
// numbering launchers and simulations map devices by, without a collective
// over the world (a context may live on a communicator of some ranks only):
// from the launcher's environment (Open MPI, MPICH/Hydra, MVAPICH, PMI,
// PALS, Slurm), else the node-local rank within `comm` (collective over it).
int node_local_rank(MPI_Comm comm);

// DMUON_CUDA_SHARE_GPU=1: ranks may share a GPU. For tests and debugging on
// one GPU only: NCCL then needs each rank to look like another host
// (NCCL_HOSTID), and moves the data through host sockets.
bool cuda_sharing_allowed();

}  // namespace dmuon
