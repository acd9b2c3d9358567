#include "file_seal.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "collective.hpp"
#include "core/error.hpp"
#include "crc32c.hpp"
#include "direct_chunks.hpp"
#include "format.hpp"
#include "h5_util.hpp"
#include "posix_io.hpp"

namespace dmuon::ckpt {
namespace {

constexpr int kCorrupt = DMUON_ERR_CHECKPOINT_CORRUPT;

// The header, little-endian, at the start of the user block (version 2):
//   [0, 16)    magic "dmuon-ckpt-seal\n"
//   [16, 20)   seal version (uint32): 2
//   [20, 24)   user block bytes (uint32, a power of two >= 512)
//   [24, 32)   file length in bytes, user block included (uint64)
//   [32, 36)   CRC-32C of the covered bytes: [block, length) minus the
//              extents, concatenated in file order (uint32)
//   [36, 40)   number of extents n (uint32)
//   [40, 44)   CRC-32C of bytes [64, block): the extent list and the zero
//              padding after it (uint32)
//   [44, 60)   zero
//   [60, 64)   CRC-32C of bytes [0, 60) (uint32): the header checks itself
//              before its block size and count are trusted to read the list.
//   [64, 64 + 16n) extents, sorted, disjoint: offset (uint64), length (uint64)
// Version 1 (still verified): header CRC at [508, 512) over [0, 508), block
// 512, CRC-32C of all of [512, length) at [32, 36), no extents.
constexpr char kMagic[16] = {'d', 'm', 'u', 'o', 'n', '-', 'c', 'k', 'p', 't', '-', 's', 'e', 'a', 'l', '\n'};
constexpr uint32_t kSealVersion = 2;
constexpr std::size_t kVersionAt = 16, kBlockAt = 20, kLengthAt = 24, kBodyCrcAt = 32, kCountAt = 36,
                      kListCrcAt = 40, kHeaderCrcAt = 60, kListAt = 64, kExtentBytes = 16;
constexpr std::size_t kV1SelfCrcAt = 508;
constexpr int64_t kMinBlock = 512;
// Beyond what a uint32 block field can name (and far beyond any real list).
constexpr int64_t kMaxBlock = int64_t{1} << 31;

// Reads of the covered bytes go through a bounded buffer.
constexpr std::size_t kReadBytes = std::size_t{4} << 20;
// Covered bytes below this are checksummed by rank 0 alone: for a checkpoint
// of any size they are HDF5's metadata, tens of KB, and one rank's reads
// (which also warm the page cache for H5Fopen) beat N ranks' small ones.
constexpr int64_t kSplitBytes = int64_t{16} << 20;

template <class T>
T load(const unsigned char* b, std::size_t at) {
  T v;
  std::memcpy(&v, b + at, sizeof v);  // little-endian hosts only, as the file format
  return v;
}
template <class T>
void store(unsigned char* b, std::size_t at, T v) {
  std::memcpy(b + at, &v, sizeof v);
}

[[noreturn]] void io_fail(const std::string& what, int err) { fail(DMUON_ERR_IO, what + ": " + std::strerror(err)); }

// A file descriptor closed on every path.
// Read exactly n bytes at `at`; false when the file ends first.
bool pread_all(int fd, void* buf, std::size_t n, int64_t at, const std::string& path) {
  int err = 0;
  if (pread_exact(fd, buf, n, static_cast<uint64_t>(at), &err)) return true;
  if (err) io_fail("cannot read '" + path + "'", err);
  return false;
}

// What the seal covers: [block, length) without the extents, as file ranges
// in order (the extents already checked sorted, disjoint and inside).
std::vector<SealExtent> covered_ranges(int64_t block, int64_t length, const std::vector<SealExtent>& extents) {
  std::vector<SealExtent> out;
  uint64_t at = static_cast<uint64_t>(block);
  for (const SealExtent& e : extents) {
    if (e.offset > at) out.push_back({at, e.offset - at});
    at = e.offset + e.length;
  }
  if (static_cast<uint64_t>(length) > at) out.push_back({at, static_cast<uint64_t>(length) - at});
  return out;
}

// CRC-32C of the bytes [lo, hi) of the concatenation of `ranges`; false when
// the file ends first.
bool crc_of_share(int fd, const std::string& path, const std::vector<SealExtent>& ranges, int64_t lo, int64_t hi,
                  uint32_t& crc) {
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min<int64_t>(std::max<int64_t>(hi - lo, 1), kReadBytes)));
  crc = 0;
  int64_t base = 0;  // position of the current range in the concatenation
  for (const SealExtent& r : ranges) {
    const int64_t len = static_cast<int64_t>(r.length);
    const int64_t from = std::max(lo, base), to = std::min(hi, base + len);
    for (int64_t at = from; at < to;) {
      const std::size_t n = static_cast<std::size_t>(std::min<int64_t>(to - at, static_cast<int64_t>(buf.size())));
      if (!pread_all(fd, buf.data(), n, static_cast<int64_t>(r.offset) + (at - base), path)) return false;
      crc = crc32c(buf.data(), n, crc);
      at += static_cast<int64_t>(n);
    }
    base += len;
    if (base >= hi) break;
  }
  return true;
}

int64_t covered_bytes(const std::vector<SealExtent>& ranges) {
  int64_t n = 0;
  for (const SealExtent& r : ranges) n += static_cast<int64_t>(r.length);
  return n;
}

// What rank 0 learned from the header, sent to every rank.
struct Header {
  int64_t block = 0, length = 0;
  uint32_t version = 0, expected = 0;
  std::vector<SealExtent> extents;
};

// Rank 0: the header and extent list of `path`, checked (see the top).
Header read_header(const std::string& path) {
  const std::string file = "'" + path + "'";
  PosixFile fd;
  fd.open_read(path);
  const int64_t actual = fd.size(path);
  std::vector<unsigned char> b(static_cast<std::size_t>(kMinBlock));
  require(actual >= kMinBlock && pread_all(fd.fd(), b.data(), b.size(), 0, path), kCorrupt,
          file + " is " + std::to_string(actual) + " bytes, too short to hold its seal (" + std::to_string(kMinBlock) +
              " bytes): truncated, or not a dmuon checkpoint");
  require(std::memcmp(b.data(), kMagic, sizeof kMagic) == 0, kCorrupt,
          file + " has no seal (its first bytes are not \"dmuon-ckpt-seal\"): damaged, or not a dmuon checkpoint");
  Header h;
  h.version = load<uint32_t>(b.data(), kVersionAt);
  const bool v2_header = load<uint32_t>(b.data(), kHeaderCrcAt) == crc32c(b.data(), kHeaderCrcAt);
  const bool v1_header = !v2_header && h.version == 1 && load<uint32_t>(b.data(), kV1SelfCrcAt) == crc32c(b.data(), kV1SelfCrcAt);
  require(v1_header || v2_header, kCorrupt, file + ": the seal header is damaged (its own CRC-32C does not match)");
  // Every version after 1 keeps bytes [0, 64) as above, so a newer one is told apart from damage.
  require(v1_header || h.version >= 2, kCorrupt, file + ": the seal version " + std::to_string(h.version) + " is invalid");
  require(h.version <= kSealVersion, DMUON_ERR_NOT_SUPPORTED,
          file + ": seal version " + std::to_string(h.version) + " is newer than this library's (" +
              std::to_string(kSealVersion) + ")");
  h.block = load<uint32_t>(b.data(), kBlockAt);
  const uint64_t sealed = load<uint64_t>(b.data(), kLengthAt);
  h.expected = load<uint32_t>(b.data(), kBodyCrcAt);
  if (v1_header) {
    require(h.block == kMinBlock, kCorrupt,
            file + ": the seal names a user block of " + std::to_string(h.block) + " bytes, not 512");
  } else {
    // The header's CRC matched, so these are as written; checked anyway
    // before they size a read (a tool may have sealed it wrongly).
    require(h.block >= kMinBlock && h.block <= kMaxBlock && (h.block & (h.block - 1)) == 0 &&
                h.block <= static_cast<int64_t>(sealed),
            kCorrupt, file + ": the seal names an invalid user block of " + std::to_string(h.block) + " bytes");
  }
  require(sealed == static_cast<uint64_t>(actual), kCorrupt,
          file + " is " + std::to_string(actual) + " bytes, its seal says " + std::to_string(sealed) +
              " (truncated or extended)");
  h.length = actual;
  if (v1_header) return h;

  const uint64_t count = load<uint32_t>(b.data(), kCountAt);
  require(kListAt + count * kExtentBytes <= static_cast<uint64_t>(h.block), kCorrupt,
          file + ": the seal lists " + std::to_string(count) + " extents, more than its user block of " +
              std::to_string(h.block) + " bytes holds");
  b.resize(static_cast<std::size_t>(h.block));
  require(pread_all(fd.fd(), b.data() + kMinBlock, b.size() - kMinBlock, kMinBlock, path), kCorrupt,
          file + " ends inside its user block (truncated)");
  require(load<uint32_t>(b.data(), kListCrcAt) == crc32c(b.data() + kListAt, b.size() - kListAt), kCorrupt,
          file + ": the seal's extent list is damaged (its CRC-32C does not match)");
  uint64_t end = static_cast<uint64_t>(h.block);
  for (uint64_t i = 0; i < count; ++i) {
    const SealExtent e{load<uint64_t>(b.data(), kListAt + i * kExtentBytes),
                       load<uint64_t>(b.data(), kListAt + i * kExtentBytes + 8)};
    const std::string which = "extent " + std::to_string(i) + " [" + std::to_string(e.offset) + ", +" +
                              std::to_string(e.length) + ")";
    require(e.length > 0, kCorrupt, file + ": the seal's " + which + " is empty");
    require(e.offset >= end, kCorrupt,
            file + ": the seal's " + which +
                (i == 0 ? " starts inside the user block" : " overlaps the one before or is out of order"));
    require(e.offset <= static_cast<uint64_t>(h.length) && e.length <= static_cast<uint64_t>(h.length) - e.offset,
            kCorrupt, file + ": the seal's " + which + " lies outside the file (" + std::to_string(h.length) + " bytes)");
    h.extents.push_back(e);
    end = e.offset + e.length;
  }
  return h;
}

}  // namespace

int64_t seal_block_bytes(std::size_t max_extents) {
  int64_t block = kMinBlock;
  while (block < static_cast<int64_t>(kListAt + max_extents * kExtentBytes)) block *= 2;
  return block;
}

std::vector<SealExtent> merge_extents(std::vector<SealExtent> extents) {
  std::sort(extents.begin(), extents.end(),
            [](const SealExtent& a, const SealExtent& b) { return a.offset < b.offset; });
  std::vector<SealExtent> out;
  for (const SealExtent& e : extents) {
    if (e.length == 0) continue;
    if (!out.empty() && e.offset <= out.back().offset + out.back().length)
      out.back().length = std::max(out.back().offset + out.back().length, e.offset + e.length) - out.back().offset;
    else
      out.push_back(e);
  }
  return out;
}

void write_seal(const std::string& path, int64_t block, std::vector<SealExtent> extents) {
  require(block >= kMinBlock && block <= kMaxBlock && (block & (block - 1)) == 0, DMUON_ERR_INTERNAL,
          "write_seal: invalid user block size " + std::to_string(block));
  PosixFile fd;
  fd.open_read_write(path);
  const int64_t length = fd.size(path);
  require(length >= block, DMUON_ERR_IO,
          "'" + path + "' is shorter than its user block: HDF5 did not reserve room for the seal");
  extents = merge_extents(std::move(extents));
  // What does not fit stays covered (the largest are kept out: they save the most reading).
  const std::size_t room = static_cast<std::size_t>(block - static_cast<int64_t>(kListAt)) / kExtentBytes;
  if (extents.size() > room) {
    std::stable_sort(extents.begin(), extents.end(),
                     [](const SealExtent& a, const SealExtent& b) { return a.length > b.length; });
    extents.resize(room);
    extents = merge_extents(std::move(extents));
  }
  for (const SealExtent& e : extents)
    require(e.offset >= static_cast<uint64_t>(block) && e.offset + e.length <= static_cast<uint64_t>(length),
            DMUON_ERR_INTERNAL, "write_seal: a data extent of '" + path + "' lies outside its HDF5 part");
  const std::vector<SealExtent> ranges = covered_ranges(block, length, extents);
  uint32_t crc = 0;
  if (!crc_of_share(fd.fd(), path, ranges, 0, covered_bytes(ranges), crc))
    fail(DMUON_ERR_IO, "'" + path + "' shrank while it was being sealed");
  std::vector<unsigned char> b(static_cast<std::size_t>(block), 0);
  std::memcpy(b.data(), kMagic, sizeof kMagic);
  store<uint32_t>(b.data(), kVersionAt, kSealVersion);
  store<uint32_t>(b.data(), kBlockAt, static_cast<uint32_t>(block));
  store<uint64_t>(b.data(), kLengthAt, static_cast<uint64_t>(length));
  store<uint32_t>(b.data(), kBodyCrcAt, crc);
  store<uint32_t>(b.data(), kCountAt, static_cast<uint32_t>(extents.size()));
  for (std::size_t i = 0; i < extents.size(); ++i) {
    store<uint64_t>(b.data(), kListAt + i * kExtentBytes, extents[i].offset);
    store<uint64_t>(b.data(), kListAt + i * kExtentBytes + 8, extents[i].length);
  }
  store<uint32_t>(b.data(), kListCrcAt, crc32c(b.data() + kListAt, b.size() - kListAt));
  store<uint32_t>(b.data(), kHeaderCrcAt, crc32c(b.data(), kHeaderCrcAt));
  pwrite_exact(fd.fd(), b.data(), b.size(), 0, "cannot write the seal of '" + path + "'");
}

void seal_file(MPI_Comm comm, const std::string& path) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  agreed(comm, [&] {
    if (rank != 0) return;
    hsize_t block = 0;
    std::vector<SealExtent> extents;
    {
      QuietHdf5 quiet;
      H5Id file = h5_file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), DMUON_ERR_IO,
                          "cannot open '" + path + "' to seal it");
      H5Id fcpl = h5_plist(H5Fget_create_plist(file), DMUON_ERR_IO, "cannot read the creation list of '" + path + "'");
      h5_require(H5Pget_userblock(fcpl, &block) >= 0, DMUON_ERR_IO, "cannot read the user block size of '" + path + "'");
      require(block >= static_cast<hsize_t>(kMinBlock), DMUON_ERR_IO, "'" + path + "' has no user block to hold a seal");
      extents = data_chunk_extents(file, static_cast<uint64_t>(block));
      h5_require(file.close(), DMUON_ERR_IO, "cannot close '" + path + "'");
    }
    write_seal(path, static_cast<int64_t>(block), std::move(extents));
  });
}

int64_t verify_seal(MPI_Comm comm, const std::string& path) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  // Rank 0 checks the header and the list; the verdict reaches every rank
  // before any of them reads the covered bytes.
  Header h;
  agreed(comm, [&] {
    if (rank == 0) h = read_header(path);
  });
  int64_t fixed[3] = {h.block, h.length, static_cast<int64_t>(h.extents.size())};
  check_mpi(MPI_Bcast(fixed, 3, MPI_INT64_T, 0, comm), "MPI_Bcast (seal header)");
  check_mpi(MPI_Bcast(&h.expected, 1, MPI_UINT32_T, 0, comm), "MPI_Bcast (seal checksum)");
  h.block = fixed[0];
  h.length = fixed[1];
  h.extents.resize(static_cast<std::size_t>(fixed[2]));
  static_assert(sizeof(SealExtent) == 16, "extents travel as pairs of uint64");
  if (!h.extents.empty())
    check_mpi(MPI_Bcast(h.extents.data(), static_cast<int>(h.extents.size() * 2), MPI_UINT64_T, 0, comm),
              "MPI_Bcast (seal extents)");
  const std::vector<SealExtent> ranges = covered_ranges(h.block, h.length, h.extents);
  const int64_t total = covered_bytes(ranges);
  const int share_world = total < kSplitBytes ? 1 : world;
  std::vector<CrcPiece> mine;
  agreed(comm, [&] {
    if (rank >= share_world) return;
    const auto [lo, hi] = even_share(total, rank, share_world);
    if (hi <= lo) return;
    PosixFile fd;
    fd.open_read(path);
    uint32_t crc = 0;
    require(crc_of_share(fd.fd(), path, ranges, lo, hi, crc), kCorrupt,
            "'" + path + "' ended before the " + std::to_string(h.length) + " bytes its seal covers (truncated)");
    mine.push_back({lo, hi - lo, crc});
  });
  const uint32_t crc = combine_crc(comm, mine, total);
  agreed(comm, [&] {
    require(crc == h.expected, kCorrupt,
            "'" + path + "' is damaged: the CRC-32C of the " + std::to_string(total) +
                " bytes its seal covers (HDF5's structure) does not match the seal");
  });
  return h.block;
}

}  // namespace dmuon::ckpt
