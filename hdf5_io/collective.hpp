// Agreement between ranks for the checkpoint code: every rank must reach the
// same outcome (or some wait forever in the next collective), and the pieces
// of one checksum, computed by different ranks, are combined in canonical order.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace dmuon::ckpt {

// The outcome of a local step on this rank: 0, or a status and its message.
struct LocalOutcome {
  int status = 0;
  std::string message;
};

// Collective. When any rank failed, every rank throws the error of the lowest
// failing rank (its status and message, prefixed with the rank).
void agree(MPI_Comm comm, const LocalOutcome& mine);

// Run `body` on every rank and agree on its outcome (see above). `body` must
// not call collectives after the point where it may throw on some rank only.
template <class F>
void agreed(MPI_Comm comm, F&& body) {
  LocalOutcome mine;
  try {
    body();
  } catch (const Error& e) {
    mine = {e.status(), e.what()};
  } catch (const std::bad_alloc&) {
    mine = {DMUON_ERR_OUT_OF_MEMORY, "out of memory"};
  } catch (const std::exception& e) {
    mine = {DMUON_ERR_INTERNAL, std::string("internal error: ") + e.what()};
  }
  agree(comm, mine);
}

void check_mpi(int rc, const char* what);

std::string bcast_string(MPI_Comm comm, const std::string& s, int root = 0);
std::vector<std::string> bcast_strings(MPI_Comm comm, const std::vector<std::string>& v, int root = 0);
std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine);

// One piece of a buffer's canonical bytes and its CRC-32C.
struct CrcPiece {
  int64_t offset;  // bytes from the start of the dataset
  int64_t length;  // bytes
  uint32_t crc;
};

// Collective: the CRC-32C of a whole dataset of `total_bytes` from the pieces
// every rank computed. The pieces of all ranks must tile [0, total_bytes)
// exactly; the result does not depend on how they were split.
uint32_t combine_crc(MPI_Comm comm, const std::vector<CrcPiece>& mine, int64_t total_bytes);

// Collective, in place: rank r's `segment_bytes` at buf + r * segment_bytes
// reach every rank (any size, beyond MPI's int counts).
void allgather_segments(MPI_Comm comm, void* buf, std::size_t segment_bytes);

// Collective, in place: rank r's bytes [displs[r], displs[r] + counts[r]) of buf
// reach every rank.
void allgatherv_bytes(MPI_Comm comm, void* buf, const std::vector<int64_t>& counts,
                      const std::vector<int64_t>& displs);

// Collective, in place, any n (sent in pieces within MPI's int counts):
// root's n values reach every rank; every rank's n values are summed.
void bcast_u64(MPI_Comm comm, uint64_t* data, std::size_t n, int root, const char* what);
void allreduce_sum_u64(MPI_Comm comm, uint64_t* data, std::size_t n, const char* what);

// Collective: whether all ranks of `comm` run on one node
// (MPI_COMM_TYPE_SHARED), and so read a file through one page cache. The
// same answer on every rank.
bool ranks_share_node(MPI_Comm comm);

// Collective: true on every rank when `mine` is true on every rank.
bool all_ranks(MPI_Comm comm, bool mine);

}  // namespace dmuon::ckpt
