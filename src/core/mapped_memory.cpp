#include "core/mapped_memory.hpp"

#include <sys/mman.h>

#include <new>
#include <system_error>

namespace dmuon {

void* map_zeroed(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
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
