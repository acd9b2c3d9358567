#include "core/mapped_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>

// Linux 5.7; defined here for older headers (older kernels answer EINVAL).
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
// Linux 5.14; defined here for older headers (older kernels answer EINVAL).
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace dmuon {

void* map_anonymous(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

bool populate(void* p, std::size_t bytes) noexcept {
  constexpr std::size_t kStep = std::size_t{16} << 20;
  char* base = static_cast<char*>(p);
  for (std::size_t at = 0; at < bytes; at += kStep) {
    const std::size_t n = std::min(kStep, bytes - at);
    int rc;
    do rc = ::madvise(base + at, n, MADV_POPULATE_WRITE);
    while (rc != 0 && errno == EINTR);
    if (rc == 0) continue;
    // A kernel before Linux 5.14 (EINVAL): the pages come on first touch
    // instead. (Writing to them here could race with the caller's writes.)
    return errno == EINVAL;
  }
  return true;
}

void* map_zeroed(std::size_t bytes) {
  void* p = map_anonymous(bytes);
  if (!populate(p, bytes)) {
    ::munmap(p, bytes);
    throw std::bad_alloc();
  }
  return p;
}

bool move_mapping(void* to, void* from, std::size_t bytes, Unmapper& unmapper) noexcept {
  void* aside = ::mremap(to, bytes, bytes, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
  if (aside == MAP_FAILED) return false;
  if (::mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED) {
    unmapper.unmap(aside, bytes);
    return true;
  }
  // The kernel refused the move (out of mappings): the old pages go back,
  // moved if it lets us, else copied into `to` (still mapped, or mapped anew).
  if (::mremap(aside, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED) return false;
  if (::mmap(to, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
    std::memcpy(to, aside, bytes);
  ::munmap(aside, bytes);
  return false;
}

Unmapper::~Unmapper() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Unmapper::unmap(void* p, std::size_t bytes) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    queue_.emplace_back(p, bytes);
  } catch (...) {  // no thread or no memory: unmap here
    ::munmap(p, bytes);
    return;
  }
  wake_.notify_one();
}

void Unmapper::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, and nothing left
    const auto [p, bytes] = queue_.back();
    queue_.pop_back();
    lock.unlock();
    ::munmap(p, bytes);
    lock.lock();
  }
}

}  // namespace dmuon
