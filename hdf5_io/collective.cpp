#include "collective.hpp"

#include <algorithm>
#include <climits>

#include "crc32c.hpp"

namespace dmuon::ckpt {

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) fail(DMUON_ERR_MPI, std::string("checkpoint: MPI failed in ") + what);
}

void agree(MPI_Comm comm, const LocalOutcome& mine) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int failed_rank = mine.status ? rank : INT_MAX, first = INT_MAX;
  check_mpi(MPI_Allreduce(&failed_rank, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (agreement)");
  if (first == INT_MAX) return;
  int status = mine.status;
  check_mpi(MPI_Bcast(&status, 1, MPI_INT, first, comm), "MPI_Bcast (agreement)");
  std::string message = bcast_string(comm, mine.message, first);
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (size > 1 && rank != first) message = "rank " + std::to_string(first) + ": " + message;
  throw Error(status, message);
}

namespace {
// Elements per MPI call: MPI counts are ints (2^30 bytes, or 2^27 uint64).
constexpr std::size_t kMpiChunk = std::size_t{1} << 30;

// f(at, count) over [0, n) in pieces of at most `piece` elements.
template <class F>
void in_pieces(std::size_t n, std::size_t piece, F&& f) {
  for (std::size_t at = 0; at < n; at += piece) f(at, static_cast<int>(std::min(n - at, piece)));
}

void bcast_bytes(MPI_Comm comm, char* p, std::size_t n, int root, const char* what) {
  in_pieces(n, kMpiChunk, [&](std::size_t at, int count) { check_mpi(MPI_Bcast(p + at, count, MPI_BYTE, root, comm), what); });
}
}  // namespace

void bcast_u64(MPI_Comm comm, uint64_t* data, std::size_t n, int root, const char* what) {
  in_pieces(n, kMpiChunk / 8, [&](std::size_t at, int count) {
    check_mpi(MPI_Bcast(data + at, count, MPI_UINT64_T, root, comm), what);
  });
}

void allreduce_sum_u64(MPI_Comm comm, uint64_t* data, std::size_t n, const char* what) {
  in_pieces(n, kMpiChunk / 8, [&](std::size_t at, int count) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + at, count, MPI_UINT64_T, MPI_SUM, comm), what);
  });
}

std::string bcast_string(MPI_Comm comm, const std::string& s, int root) {
  int64_t len = static_cast<int64_t>(s.size());
  check_mpi(MPI_Bcast(&len, 1, MPI_INT64_T, root, comm), "MPI_Bcast (string length)");
  std::string out = s;
  out.resize(static_cast<std::size_t>(len));
  require(len <= INT_MAX, DMUON_ERR_INVALID_VALUE, "checkpoint: a string is longer than 2 GiB");
  if (len) check_mpi(MPI_Bcast(&out[0], static_cast<int>(len), MPI_CHAR, root, comm), "MPI_Bcast (string)");
  return out;
}

std::vector<std::string> bcast_strings(MPI_Comm comm, const std::vector<std::string>& v, int root) {
  int64_t n = static_cast<int64_t>(v.size());
  check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm), "MPI_Bcast (string count)");
  std::vector<std::string> out(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = bcast_string(comm, i < v.size() ? v[i] : std::string(), root);
  return out;
}

std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& mine) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::vector<std::string> out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) out[static_cast<std::size_t>(r)] = bcast_string(comm, mine, r);
  return out;
}

uint32_t combine_crc(MPI_Comm comm, const std::vector<CrcPiece>& mine, int64_t total_bytes) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  // Pieces travel as three int64 each (the CRC widened) to keep one MPI type.
  std::vector<int64_t> flat;
  flat.reserve(mine.size() * 3);
  for (const CrcPiece& p : mine) flat.insert(flat.end(), {p.offset, p.length, static_cast<int64_t>(p.crc)});
  int count = static_cast<int>(flat.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  check_mpi(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, comm), "MPI_Allgather (crc counts)");
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<int64_t> all(static_cast<std::size_t>(std::max(total, 1)));
  check_mpi(MPI_Allgatherv(flat.data(), count, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T,
                           comm),
            "MPI_Allgatherv (crc pieces)");
  std::vector<CrcPiece> pieces;
  for (int i = 0; i + 2 < total; i += 3)
    if (all[static_cast<std::size_t>(i) + 1] > 0)
      pieces.push_back({all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(i) + 1],
                        static_cast<uint32_t>(all[static_cast<std::size_t>(i) + 2])});
  std::sort(pieces.begin(), pieces.end(), [](const CrcPiece& a, const CrcPiece& b) { return a.offset < b.offset; });
  uint32_t crc = 0;
  int64_t cursor = 0;
  for (const CrcPiece& p : pieces) {
    // Every rank sees the same pieces, so a gap or an overlap fails everywhere.
    require(p.offset == cursor, DMUON_ERR_INTERNAL, "checkpoint: checksum pieces do not tile the dataset");
    crc = crc32c_combine(crc, p.crc, static_cast<uint64_t>(p.length));
    cursor += p.length;
  }
  require(cursor == total_bytes, DMUON_ERR_INTERNAL, "checkpoint: checksum pieces do not cover the dataset");
  return crc;
}

void allgather_segments(MPI_Comm comm, void* buf, std::size_t segment_bytes) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (size == 1 || segment_bytes == 0) return;
  if (segment_bytes <= kMpiChunk) {
    check_mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, static_cast<int>(segment_bytes), MPI_BYTE, comm),
              "MPI_Allgather (segments)");
    return;
  }
  char* base = static_cast<char*>(buf);
  for (int r = 0; r < size; ++r)
    bcast_bytes(comm, base + static_cast<std::size_t>(r) * segment_bytes, segment_bytes, r, "MPI_Bcast (segments)");
}

void allgatherv_bytes(MPI_Comm comm, void* buf, const std::vector<int64_t>& counts,
                      const std::vector<int64_t>& displs) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (size == 1) return;
  const bool small = std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c <= static_cast<int64_t>(kMpiChunk); }) &&
                     std::all_of(displs.begin(), displs.end(), [](int64_t d) { return d <= INT_MAX; });
  if (small) {
    std::vector<int> c(counts.begin(), counts.end()), d(displs.begin(), displs.end());
    check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c.data(), d.data(), MPI_BYTE, comm),
              "MPI_Allgatherv (shares)");
    return;
  }
  char* base = static_cast<char*>(buf);
  for (int r = 0; r < size; ++r)
    bcast_bytes(comm, base + displs[static_cast<std::size_t>(r)], static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]),
                r, "MPI_Bcast (shares)");
}

bool ranks_share_node(MPI_Comm comm) {
  int rank = 0, world = 1, node_size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  // Either every rank's node holds all ranks or none does.
  return node_size == world;
}

bool all_ranks(MPI_Comm comm, bool mine) {
  int all = mine ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (all ranks)");
  return all != 0;
}

}  // namespace dmuon::ckpt
