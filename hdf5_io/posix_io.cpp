#include "posix_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

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

ReadAhead::ReadAhead(int fd, uint64_t window) : fd_(fd), window_(window) {
  try {
    hinter_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {  // no thread: advance() gives the hints itself
  }
}

ReadAhead::~ReadAhead() {
  if (!hinter_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  hinter_.join();
}

void ReadAhead::add(uint64_t at, uint64_t bytes) {
  // Pieces of at most 8 MiB, so the window moves in steps much smaller than itself.
  constexpr uint64_t kPiece = uint64_t{8} << 20;
  std::lock_guard<std::mutex> lock(mutex_);
  while (bytes > 0) {
    if (!ranges_.empty() && ranges_.back().at + ranges_.back().bytes == at && ranges_.back().bytes < kPiece) {
      const uint64_t grow = std::min(bytes, kPiece - ranges_.back().bytes);
      ranges_.back().bytes += grow;
      at += grow;
      bytes -= grow;
    } else {
      const uint64_t take = std::min(bytes, kPiece);
      ranges_.push_back({at, take});
      at += take;
      bytes -= take;
    }
  }
}

void ReadAhead::advance(uint64_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  read_ += bytes;
  if (hinter_.joinable()) {
    lock.unlock();
    wake_.notify_one();
    return;
  }
  while (due()) hint_next(lock);
}

void ReadAhead::hint_next(std::unique_lock<std::mutex>& lock) {
  const Range r = ranges_[next_++];  // a copy: add() may grow ranges_ meanwhile
  hinted_ += r.bytes;
  lock.unlock();
  (void)::posix_fadvise(fd_, static_cast<off_t>(r.at), static_cast<off_t>(r.bytes), POSIX_FADV_WILLNEED);
  lock.lock();
}

void ReadAhead::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || due(); });
    if (stop_) return;
    hint_next(lock);
  }
}

}  // namespace dmuon::ckpt
