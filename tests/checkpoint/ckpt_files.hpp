// Checkpoint directories and files for the checkpoint gtests (every rank runs
// every test): a fresh directory under the build tree, a checkpoint's path,
// and damage done by rank 0 alone while the others wait.
#pragma once
#include <mpi.h>

#include <filesystem>
#include <string>

namespace ckpt_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// checkpoint_data/<name>, emptied, under the test's working directory.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = "checkpoint_data/" + name;
  if (world_rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

inline std::string ckpt(const std::string& dir, int64_t step) {
  return dir + "/ckpt_" + std::to_string(step) + ".h5";
}

// Rank 0 runs f (damages a file); everyone waits for it.
template <class F>
void on_rank0(F&& f) {
  if (world_rank() == 0) f();
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace ckpt_test
