// The node-local rank that the "cuda" resource maps devices by
// (cuda_device.hpp), without a GPU. A context on a communicator that only
// some ranks enter must not wait for the others: the rank came from a split
// of MPI_COMM_WORLD, which waits for every rank of the world, and such a
// context hung. The launcher's variable is read first; without one, the
// communicator's own node-local rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <map>
#include <string>

#include "backends/cuda/cuda_device.hpp"

namespace {

const char* const kLaunchers[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                  "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID", "SLURM_LOCALID"};

// Clears the launchers' variables for its lifetime.
struct NoLauncherVariables {
  std::map<std::string, std::string> saved;
  NoLauncherVariables() {
    for (const char* n : kLaunchers)
      if (const char* v = std::getenv(n)) {
        saved[n] = v;
        unsetenv(n);
      }
  }
  ~NoLauncherVariables() {
    for (const auto& [n, v] : saved) setenv(n.c_str(), v.c_str(), 1);
  }
};

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// The communicator of the ranks for which `member` holds (MPI_COMM_NULL on the others).
MPI_Comm only(bool member) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world_rank(), &c);
  return c;
}

TEST(CudaNodeRank, ACommunicatorOfOneRankDoesNotWaitForTheOthers) {
  MPI_Comm last = only(world_rank() == 1);
  if (last != MPI_COMM_NULL) {
    // The other ranks are in the barrier below, in no split.
    const int local = dmuon::node_local_rank(last);
    EXPECT_GE(local, 0);
    {
      NoLauncherVariables none;
      EXPECT_EQ(dmuon::node_local_rank(last), 0) << "without a launcher: the rank within the communicator";
    }
    MPI_Comm_free(&last);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(CudaNodeRank, TheLauncherVariableWins) {
  NoLauncherVariables none;
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(dmuon::node_local_rank(MPI_COMM_SELF), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5", 1);  // earlier in the list
  EXPECT_EQ(dmuon::node_local_rank(MPI_COMM_SELF), 5);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "5x", 1);  // malformed: the next one
  EXPECT_EQ(dmuon::node_local_rank(MPI_COMM_SELF), 3);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
  EXPECT_EQ(dmuon::node_local_rank(MPI_COMM_SELF), 0);
}

}  // namespace
