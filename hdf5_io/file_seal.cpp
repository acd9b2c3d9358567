#include "file_seal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "collective.hpp"
#include "core/error.hpp"
#include "crc32c.hpp"
#include "format.hpp"

namespace dmuon::ckpt {
namespace {

constexpr int kCorrupt = DMUON_ERR_CHECKPOINT_CORRUPT;

// The header, little-endian, at the start of the user block:
//   [0, 16)    magic "dmuon-ckpt-seal\n"
//   [16, 20)   seal version (uint32)
//   [20, 24)   user block bytes (uint32, 512)
//   [24, 32)   file length in bytes, user block included (uint64)
//   [32, 36)   CRC-32C of bytes [512, length) (uint32)
//   [36, 508)  zero
//   [508, 512) CRC-32C of bytes [0, 508) (uint32): the header checks itself,
//              so a damaged header is told apart from a damaged body.
constexpr char kMagic[16] = {'d', 'm', 'u', 'o', 'n', '-', 'c', 'k', 'p', 't', '-', 's', 'e', 'a', 'l', '\n'};
constexpr uint32_t kSealVersion = 1;
constexpr std::size_t kVersionAt = 16, kBlockAt = 20, kLengthAt = 24, kBodyCrcAt = 32, kSelfCrcAt = 508;
using Block = std::array<unsigned char, static_cast<std::size_t>(kSealBytes)>;

// Reads of the body go through a bounded buffer: a rank's share of a large
// checkpoint is never held in memory at once.
constexpr std::size_t kReadBytes = std::size_t{4} << 20;

template <class T>
T load(const Block& b, std::size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);  // little-endian hosts only, as the file format
  return v;
}
template <class T>
void store(Block& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

[[noreturn]] void io_fail(const std::string& what, int err) { fail(DMUON_ERR_IO, what + ": " + std::strerror(err)); }

// A file descriptor closed on every path.
class Fd {
 public:
  Fd(const std::string& path, int flags) : fd_(::open(path.c_str(), flags | O_CLOEXEC)) {
    if (fd_ < 0) io_fail("cannot open '" + path + "'", errno);
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int64_t file_length(const Fd& fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) io_fail("cannot stat '" + path + "'", errno);
  return static_cast<int64_t>(st.st_size);
}

// Read exactly n bytes at `at`; false when the file ends first.
bool pread_all(int fd, void* buf, std::size_t n, int64_t at, const std::string& path) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) io_fail("cannot read '" + path + "'", errno);
    if (got == 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
    at += got;
  }
  return true;
}

// This rank's even share of the body [kSealBytes, length) and its CRC-32C,
// at offsets counted from the end of the user block.
std::vector<CrcPiece> body_piece(MPI_Comm comm, const std::string& path, int64_t length, bool* short_file) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const auto [lo, hi] = even_share(length - kSealBytes, rank, world);
  *short_file = false;
  if (hi <= lo) return {};
  Fd fd(path, O_RDONLY);
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min<int64_t>(hi - lo, kReadBytes)));
  uint32_t crc = 0;
  for (int64_t at = lo; at < hi;) {
    const std::size_t n = static_cast<std::size_t>(std::min<int64_t>(hi - at, static_cast<int64_t>(buf.size())));
    if (!pread_all(fd.get(), buf.data(), n, kSealBytes + at, path)) {
      *short_file = true;
      return {};
    }
    crc = crc32c(buf.data(), n, crc);
    at += static_cast<int64_t>(n);
  }
  return {{lo, hi - lo, crc}};
}

// Collective: CRC-32C of the body from every rank's share. `length` must be
// the same on every rank. Throws `short_status` (agreed) when some rank found
// the file shorter than `length`.
uint32_t body_crc(MPI_Comm comm, const std::string& path, int64_t length, int short_status) {
  std::vector<CrcPiece> mine;
  agreed(comm, [&] {
    bool short_file = false;
    mine = body_piece(comm, path, length, &short_file);
    require(!short_file, short_status,
            "'" + path + "' ended before the " + std::to_string(length) + " bytes its seal covers (truncated)");
  });
  return combine_crc(comm, mine, length - kSealBytes);
}

}  // namespace

void seal_file(MPI_Comm comm, const std::string& path) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Rank 0's length of the closed file: MPI-IO's close has made every rank's
  // writes visible to it.
  int64_t length = 0;
  agreed(comm, [&] {
    if (rank != 0) return;
    Fd fd(path, O_RDONLY);
    length = file_length(fd, path);
    require(length >= kSealBytes, DMUON_ERR_IO,
            "'" + path + "' is shorter than its user block: HDF5 did not reserve room for the seal");
  });
  check_mpi(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm), "MPI_Bcast (seal length)");
  const uint32_t crc = body_crc(comm, path, length, DMUON_ERR_IO);
  agreed(comm, [&] {
    if (rank != 0) return;
    Block b{};
    std::memcpy(b.data(), kMagic, sizeof kMagic);
    store<uint32_t>(b, kVersionAt, kSealVersion);
    store<uint32_t>(b, kBlockAt, static_cast<uint32_t>(kSealBytes));
    store<uint64_t>(b, kLengthAt, static_cast<uint64_t>(length));
    store<uint32_t>(b, kBodyCrcAt, crc);
    store<uint32_t>(b, kSelfCrcAt, crc32c(b.data(), kSelfCrcAt));
    Fd fd(path, O_WRONLY);
    const ssize_t n = ::pwrite(fd.get(), b.data(), b.size(), 0);
    if (n < 0) io_fail("cannot write the seal of '" + path + "'", errno);
    if (n != static_cast<ssize_t>(b.size())) io_fail("cannot write the seal of '" + path + "'", ENOSPC);
  });
}

void verify_seal(MPI_Comm comm, const std::string& path) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Rank 0 checks the header and the length; the verdict reaches every rank
  // before any of them reads the body.
  int64_t length = 0;
  uint32_t expected = 0;
  agreed(comm, [&] {
    if (rank != 0) return;
    const std::string file = "'" + path + "'";
    Fd fd(path, O_RDONLY);
    const int64_t actual = file_length(fd, path);
    Block b{};
    require(actual >= kSealBytes && pread_all(fd.get(), b.data(), b.size(), 0, path), kCorrupt,
            file + " is " + std::to_string(actual) + " bytes, too short to hold its seal (" +
                std::to_string(kSealBytes) + " bytes): truncated, or not a dmuon checkpoint");
    require(std::memcmp(b.data(), kMagic, sizeof kMagic) == 0, kCorrupt,
            file + " has no seal (its first bytes are not \"dmuon-ckpt-seal\"): damaged, or not a dmuon checkpoint");
    require(load<uint32_t>(b, kSelfCrcAt) == crc32c(b.data(), kSelfCrcAt), kCorrupt,
            file + ": the seal header is damaged (its own CRC-32C does not match)");
    const uint32_t version = load<uint32_t>(b, kVersionAt);
    require(version >= 1, kCorrupt, file + ": the seal version 0 is invalid");
    require(version <= kSealVersion, DMUON_ERR_NOT_SUPPORTED,
            file + ": seal version " + std::to_string(version) + " is newer than this library's (" +
                std::to_string(kSealVersion) + ")");
    require(load<uint32_t>(b, kBlockAt) == static_cast<uint32_t>(kSealBytes), kCorrupt,
            file + ": the seal names a user block of " + std::to_string(load<uint32_t>(b, kBlockAt)) +
                " bytes, not " + std::to_string(kSealBytes));
    const uint64_t sealed = load<uint64_t>(b, kLengthAt);
    require(sealed == static_cast<uint64_t>(actual), kCorrupt,
            file + " is " + std::to_string(actual) + " bytes, its seal says " + std::to_string(sealed) +
                " (truncated or extended)");
    length = actual;
    expected = load<uint32_t>(b, kBodyCrcAt);
  });
  check_mpi(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm), "MPI_Bcast (seal length)");
  check_mpi(MPI_Bcast(&expected, 1, MPI_UINT32_T, 0, comm), "MPI_Bcast (seal checksum)");
  const uint32_t crc = body_crc(comm, path, length, kCorrupt);
  agreed(comm, [&] {
    require(crc == expected, kCorrupt,
            "'" + path + "' is damaged: the CRC-32C of its " + std::to_string(length - kSealBytes) +
                " bytes after the seal does not match the seal");
  });
}

}  // namespace dmuon::ckpt
