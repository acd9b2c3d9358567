#include "posix_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace dmuon::ckpt {

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}

void PosixFile::open_with(const std::string& path, int flags, const char* purpose) {
  fd_ = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd_ < 0) fail(DMUON_ERR_IO, "cannot open '" + path + "'" + purpose + ": " + std::strerror(errno));
}

void PosixFile::open_write(const std::string& path) { open_with(path, O_WRONLY, " for writing"); }
void PosixFile::open_read(const std::string& path) { open_with(path, O_RDONLY, ""); }
void PosixFile::open_read_write(const std::string& path) { open_with(path, O_RDWR, ""); }

void PosixFile::close(const std::string& path) {
  const int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0) fail(DMUON_ERR_IO, "cannot close '" + path + "': " + std::strerror(errno));
}

int64_t PosixFile::size(const std::string& path) const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail(DMUON_ERR_IO, "cannot stat '" + path + "': " + std::strerror(errno));
  return static_cast<int64_t>(st.st_size);
}

bool pread_exact(int fd, void* buf, std::size_t n, uint64_t at, int* err) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      *err = got < 0 ? errno : 0;
      return false;
    }
    p += got;
    n -= static_cast<std::size_t>(got);
    at += static_cast<uint64_t>(got);
  }
  return true;
}

void pwrite_exact(int fd, const void* buf, std::size_t n, uint64_t at, const std::string& what) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t got = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    // A regular file never takes 0 bytes of a non-empty write unless it is full.
    if (got <= 0) fail(DMUON_ERR_IO, what + ": " + std::strerror(got < 0 ? errno : ENOSPC));
    p += got;
    n -= static_cast<std::size_t>(got);
    at += static_cast<uint64_t>(got);
  }
}

}  // namespace dmuon::ckpt
