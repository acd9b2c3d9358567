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

// Zeroed anonymous memory of `bytes` (> 0) whose pages the kernel supplies
// (and zeroes) on first touch. Throws std::bad_alloc.
void* map_anonymous(std::size_t bytes);

// Supplies the pages of [p, p + bytes) of such a mapping now
// (MADV_POPULATE_WRITE, Linux 5.14; earlier kernels keep supplying them on
// first touch): no page fault per 4 KiB later. Contents already written
// stay, and the caller may write to the block meanwhile. In steps of 16 MiB,
// each holding the process's address-space lock only briefly: one
// MAP_POPULATE of a whole block held it as long as the zeroing took, and
// every other thread's mmap or brk (HDF5's allocations while a restore opens
// its datasets) waited for it. False when memory ran out. Transparent huge
// pages are not asked for: sometimes much faster, sometimes far slower
// (docs/decisions.md, "Checkpoints", "Measurements behind the code").
bool populate(void* p, std::size_t bytes) noexcept;

// Both: populated zeroed memory. Throws std::bad_alloc.
void* map_zeroed(std::size_t bytes);

class Unmapper;

// Moves the pages of `from` onto `to` (both from map_anonymous, `bytes`
// long): `to` keeps its address and holds what `from` held, `from` is gone.
// The pages `to` held are first set aside (MREMAP_DONTUNMAP, Linux 5.7), `to`
// staying mapped meanwhile so that no other thread's mapping can take its
// place, and go to `unmapper`. False: nothing changed (an older kernel, or
// the kernel refused); the caller copies instead.
bool move_mapping(void* to, void* from, std::size_t bytes, Unmapper& unmapper) noexcept;

// Returns blocks from map_anonymous to the kernel on a thread of its own, so
// that their owner goes on at once: a restore replaces whole buffers, and
// unmapping them is a visible part of its time. The destructor waits until
// every block is unmapped.
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
