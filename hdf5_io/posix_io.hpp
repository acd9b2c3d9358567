// Plain POSIX file access for the parts of a checkpoint dmuon reads and
// writes itself (the data chunks, the seal): one owner of the descriptor and
// the EINTR/short-transfer loops, so that both paths fail the same way.
#pragma once
#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dmuon::ckpt {

// A file opened with open(2); closed by the destructor when an error unwinds
// (the error already says what failed).
class PosixFile {
 public:
  PosixFile() = default;
  ~PosixFile();
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;
  void open_write(const std::string& path);       // the existing file; throws DMUON_ERR_IO
  void open_read(const std::string& path);        // throws DMUON_ERR_IO
  void open_read_write(const std::string& path);  // throws DMUON_ERR_IO
  void close(const std::string& path);            // throws DMUON_ERR_IO (a failed close may mean lost writes)
  int64_t size(const std::string& path) const;    // fstat; throws DMUON_ERR_IO
  int fd() const { return fd_; }

 private:
  void open_with(const std::string& path, int flags, const char* purpose);
  int fd_ = -1;
};

// Reads exactly n bytes at `at`. False when it cannot: *err is then errno, or
// 0 when the file ended first (the caller says which is a damaged file).
bool pread_exact(int fd, void* buf, std::size_t n, uint64_t at, int* err);

// Writes exactly n bytes at `at`; throws DMUON_ERR_IO "<what>: <strerror>".
void pwrite_exact(int fd, const void* buf, std::size_t n, uint64_t at, const std::string& what);

// The window a restore gives its ReadAhead: bytes of the data chunks a rank
// asks the kernel to read ahead of itself, enough to cover the zeroing of
// staging memory and the checksums of the blocks in between (a few tenths of
// a second of a local disk), small against the page cache.
constexpr uint64_t kRestoreReadAheadBytes = uint64_t{256} << 20;

// Keeps the storage busy while a reader checksums what it read: the reader
// declares the byte ranges it will read, in order, and reports its progress;
// the ranges up to `window` bytes ahead of it are handed to the kernel
// (posix_fadvise WILLNEED). A reader that waits for each block before
// checksumming it leaves the device idle for the checksum's time otherwise.
// The hints are given on a thread of their own: WILLNEED returns only once
// the kernel has queued the reads, which with a busy device is a large part
// of a restore (docs/benchmarks.md), time the reader can spend checksumming. Hints only: an error is ignored, the reads themselves still
// report theirs; without a thread to be had, the hints are given inline.
class ReadAhead {
 public:
  ReadAhead(int fd, uint64_t window);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  void add(uint64_t at, uint64_t bytes);  // the next range the reader will read
  void advance(uint64_t bytes);           // the reader is about to read this many more bytes

 private:
  struct Range {
    uint64_t at, bytes;
  };
  bool due() const { return next_ < ranges_.size() && hinted_ < read_ + window_; }
  void hint_next(std::unique_lock<std::mutex>& lock);  // gives the next range's hint, unlocked
  void run();

  int fd_;
  uint64_t window_;
  std::vector<Range> ranges_;
  std::size_t next_ = 0;
  uint64_t hinted_ = 0, read_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread hinter_;  // last: started once everything above exists
};

}  // namespace dmuon::ckpt
