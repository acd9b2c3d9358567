// Large host blocks straight from the kernel: zeroed and populated in one
// call, and handed back to it on a helper thread. Shared by the CPU backend's
// large blocks and the checkpoint reader's staging.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace dmuon {

// Zeroed anonymous memory of `bytes` (> 0), populated before it is returned
// (MADV_POPULATE_WRITE): zero pages without a memset pass and without a
// page fault per 4 KiB while the caller fills it (a gigabyte of those cost
// more than reading it from the page cache). Transparent huge
// pages (MADV_HUGEPAGE) zeroed a gigabyte in 0.06 s at best, but took
// 1.3-3.4 s at times on the VMs measured, with no compaction stall counted:
// not worth the risk. Throws std::bad_alloc.
void* map_zeroed(std::size_t bytes);

// Returns blocks from map_zeroed to the kernel on a thread of its own, so
// that their owner goes on at once: a restore replaces about a gigabyte of
// buffers, and unmapping them took 0.03-0.06 s of a 0.7 s restore on the GPU
// machine's host. The destructor waits until every block is unmapped.
class Unmapper {
 public:
  Unmapper() = default;
  ~Unmapper();
  Unmapper(const Unmapper&) = delete;
  Unmapper& operator=(const Unmapper&) = delete;
  // Unmaps inline when no thread (or no memory for the queue) can be had.
  void unmap(void* p, std::size_t bytes) noexcept;

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<void*, std::size_t>> queue_;
  bool stop_ = false;
  std::thread thread_;  // started by the first unmap
};

}  // namespace dmuon
