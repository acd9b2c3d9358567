// Test-only fault injection, shared by the checkpoint code (hdf5_io) and the
// backends: one environment variable names the points that fire.
//   DMUON_FAULT_POINT=<point>[@<rank>][,<point>[@<rank>]...]
// Rank defaults to 0. Never set it in production.
// Points: "save-kill" (SIGKILL on that rank after its first data dataset is
// written), "save-enospc" (that rank's first data write reports ENOSPC),
// "save-enospc-fsync" (that rank's fsync of the finished file reports ENOSPC),
// "save-kill-before-latest" (rank 0 dies after the rename, before `latest`
// moves), "cuda-stall" (that rank's step stream spins until the CUDA backend
// aborts; backends/cuda/cuda_watchdog.hpp).
#pragma once

namespace dmuon {

// Read from the environment at each call, so a test can arm a point between
// two calls of one process.
bool fault_armed(const char* point, int rank);

}  // namespace dmuon
