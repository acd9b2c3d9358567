// The CUDA backend's side of collective_timeout_ms: a non-blocking
// NCCL communicator, host waits bounded by the deadline, and ncclCommAbort.
// The member functions are in cuda_watchdog.cu; see there for the rules.
//
// Test-only fault point (DMUON_FAULT_POINT, core/fault_points.hpp): with DMUON_FAULT_POINT=cuda-stall[@<rank>] in
// the environment when a step begins, that rank's step stream first runs a
// kernel that spins until the backend aborts (or 60 s pass), standing in for
// a peer that never arrives. Never set it in production.
#pragma once
#include <nccl.h>

namespace dmuon {

// NCCL 2.14 brought non-blocking communicators (ncclConfig_t::blocking,
// ncclInProgress, ncclCommFinalize); older ones stay blocking, and only the
// host waits are bounded.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define DMUON_NCCL_NONBLOCKING 1
#else
#define DMUON_NCCL_NONBLOCKING 0
#endif

// A communicator of `world` ranks, non-blocking where NCCL has it; throws
// DMUON_ERR_CUDA on failure. Waits (unbounded) until every rank has joined.
ncclComm_t init_nccl_comm(int world, const ncclUniqueId& id, int rank);

}  // namespace dmuon
