// CPU backend: memory and MPI collectives. bf16 has no MPI datatype, so bf16
// reductions go through an fp32 scratch buffer and round once at the end.
//
// Collectives have two paths. Without a deadline (collective_timeout_ms = 0)
// they are MPI's blocking calls, whose tuned algorithms are the fastest. With
// one they are posted non-blocking and completed by a test loop that gives up
// at the deadline (the watchdog): a dead or hung rank then costs the survivors
// a status, not the job. A collective that missed its deadline cannot be
// cancelled (MPI forbids cancelling or freeing a non-blocking collective), so
// it stays posted and may still write into its buffers whenever MPI makes
// progress: the backend is poisoned, refuses every later collective, and
// never frees memory again (see release()).
#include "backends/cpu/cpu_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#if defined(OPEN_MPI) && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's ULFM error classes (MPIX_ERR_PROC_FAILED) when it was built with them
#endif

#include "core/error.hpp"

namespace dmuon {

namespace {
std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<std::size_t>(len));
}

// A transport that knows a rank died (ULFM: MPICH, Open MPI 5) says so with
// its own error classes; any other failure of a collective is an MPI error.
int status_of_mpi_error(int rc) {
  int cls = rc;
  MPI_Error_class(rc, &cls);
#if defined(MPIX_ERR_PROC_FAILED)
  if (cls == MPIX_ERR_PROC_FAILED) return DMUON_ERR_PEER_FAILED;
#endif
#if defined(MPIX_ERR_REVOKED)
  if (cls == MPIX_ERR_REVOKED) return DMUON_ERR_PEER_FAILED;
#endif
  return DMUON_ERR_MPI;
}

// Memory that an abandoned collective may still write: kept allocated until
// the process ends, reachable from here so that leak checkers stay quiet.
struct Abandoned {
  std::vector<void*> blocks;
  std::vector<std::vector<float>> staging;
};
Abandoned& abandoned() {
  static Abandoned* kept = new Abandoned;  // never destroyed: MPI may write until exit
  return *kept;
}

void to_float(const void* src, float* dst, int64_t n, Dtype d) {
  if (d == Dtype::fp32) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
    return;
  }
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
}

// dst = src * scale in dst's dtype: the average's division and the rounding
// back to bf16 in one pass (dst may be src for fp32).
void scaled_from_float(const float* src, float scale, void* dst, int64_t n, Dtype d) {
  if (d == Dtype::fp32) {
    float* o = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) o[i] = src[i] * scale;
    return;
  }
  auto* o = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16(src[i] * scale);
}

// MPI counts are int: large buffers go in chunks.
constexpr int64_t kMaxChunk = int64_t{1} << 30;
}  // namespace

std::unique_ptr<Backend> make_cpu_backend(MPI_Comm comm) { return std::make_unique<CpuBackend>(comm); }

CpuBackend::CpuBackend(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_);
}

CpuBackend::~CpuBackend() {
  if (!failed_status() || scratch_.empty()) return;
  try {
    abandoned().staging.push_back(std::move(scratch_));
  } catch (...) {  // out of memory: leak the buffer instead of freeing it under MPI
    new (std::nothrow) std::vector<float>(std::move(scratch_));
  }
}

// Blocks from this size up come from the kernel (map_zeroed), like the
// restore's staging whose pages move_pages_into moves into them.
constexpr std::size_t kMappedBytes = std::size_t{1} << 20;

void* CpuBackend::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes >= kMappedBytes) {
    void* p = map_zeroed(bytes);
    try {
      const std::lock_guard<std::mutex> lock(mapped_mutex_);
      mapped_.emplace(p, bytes);
    } catch (...) {
      unmapper_.unmap(p, bytes);
      throw std::bad_alloc();
    }
    return p;
  }
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}

bool CpuBackend::move_pages_into(void* dst, void* staged, std::size_t bytes) noexcept {
  {
    const std::lock_guard<std::mutex> lock(mapped_mutex_);
    const auto it = mapped_.find(dst);
    if (it == mapped_.end() || it->second != bytes) return false;
  }
  return move_mapping(dst, staged, bytes, unmapper_);
}

void CpuBackend::release(void* p) noexcept {
  if (p == nullptr) return;
  if (!failed_status()) {
    std::size_t length = 0;
    {
      const std::lock_guard<std::mutex> lock(mapped_mutex_);
      const auto it = mapped_.find(p);
      if (it != mapped_.end()) {
        length = it->second;
        mapped_.erase(it);
      }
    }
    if (length)
      unmapper_.unmap(p, length);
    else
      std::free(p);
    return;
  }
  try {  // an abandoned collective may still write here
    abandoned().blocks.push_back(p);
  } catch (...) {  // out of memory: not freeing it is what matters
  }
}
void CpuBackend::zero(void* p, std::size_t bytes) { if (bytes) std::memset(p, 0, bytes); }
void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) { if (bytes && dst != src) std::memmove(dst, src, bytes); }
void CpuBackend::upload(void* dst, const void* host, std::size_t bytes) { copy(dst, host, bytes); }
void CpuBackend::download(void* host, const void* src, std::size_t bytes) { copy(host, src, bytes); }

void CpuBackend::run(const char* what, const std::function<int()>& blocking,
                     const std::function<int(MPI_Request*)>& post) {
  check_not_failed(what);
  if (timeout_ms_ <= 0) {
    const int rc = blocking();
    if (rc != MPI_SUCCESS) poison(status_of_mpi_error(rc), std::string(what) + " failed: " + mpi_error_text(rc));
    return;
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::milliseconds(timeout_ms_);
  // Poll without pause while the collective is likely to finish soon, then
  // yield between polls: ranks may share cores (CI, oversubscribed nodes).
  const Clock::time_point spin_until = start + std::chrono::microseconds(100);
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = post(&request);
  if (rc != MPI_SUCCESS) poison(status_of_mpi_error(rc), std::string(what) + " failed: " + mpi_error_text(rc));
  for (;;) {
    int done = 0;
    rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) poison(status_of_mpi_error(rc), std::string(what) + " failed: " + mpi_error_text(rc));
    if (done) return;
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      poison(DMUON_ERR_TIMEOUT, std::string(what) + " did not complete within collective_timeout_ms = " +
                                    std::to_string(timeout_ms_) +
                                    " (a rank died, hangs, or is that late); the collective was abandoned");
    if (now >= spin_until) std::this_thread::yield();
  }
}

// What it leaves: see allreduce_leaves_sum (cpu_backend.hpp).
void CpuBackend::allreduce_gradients(void* buf, int64_t count, Dtype dtype) {
  if (count == 0 || world_ == 1) return;  // the sum over one rank is itself
  check_not_failed("MPI_Allreduce of gradients");
  float* f = static_cast<float*>(buf);
  if (dtype == Dtype::bf16) {
    scratch_.resize(static_cast<std::size_t>(count));
    to_float(buf, scratch_.data(), count, dtype);
    f = scratch_.data();
  }
  for (int64_t at = 0; at < count; at += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - at));
    float* chunk = f + at;
    run("MPI_Allreduce of gradients",
        [&] { return MPI_Allreduce(MPI_IN_PLACE, chunk, n, MPI_FLOAT, MPI_SUM, comm_); },
        [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, chunk, n, MPI_FLOAT, MPI_SUM, comm_, r); });
  }
  if (dtype == Dtype::bf16) scaled_from_float(f, 1.0f / static_cast<float>(world_), buf, count, dtype);
}

// An fp32 buffer is MPI's send buffer as it is, a bf16 one is widened first;
// the average is divided on its way into this rank's segment. Not in place:
// MPI_IN_PLACE leaves partial sums in the other segments, padding included,
// which the user never overwrites and the next step would add again.
void CpuBackend::reduce_scatter_average(void* buf, int64_t segment, Dtype dtype) {
  if (segment == 0 || world_ == 1) return;  // one rank owns everything, and its average is itself
  const char* what = "MPI_Reduce_scatter_block of Muon gradients";
  check_not_failed(what);
  require(segment <= kMaxChunk, DMUON_ERR_NOT_SUPPORTED, "a Muon segment over 2^30 elements per rank");
  const int64_t total = segment * world_;
  const bool widen = dtype == Dtype::bf16;
  scratch_.resize(static_cast<std::size_t>(widen ? total + segment : segment));
  float* mine = scratch_.data() + (widen ? total : 0);
  const float* all = static_cast<const float*>(buf);
  if (widen) {
    to_float(buf, scratch_.data(), total, dtype);
    all = scratch_.data();
  }
  const int n = static_cast<int>(segment);
  // Posted and waited for also without a timeout: Open MPI's nonblocking
  // reduce-scatter ran faster here than its blocking one (docs/decisions.md,
  // "CPU reduce-scatter through the nonblocking call").
  auto post = [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(all, mine, n, MPI_FLOAT, MPI_SUM, comm_, r); };
  run(what,
      [&] {
        MPI_Request r = MPI_REQUEST_NULL;
        const int rc = post(&r);
        return rc != MPI_SUCCESS ? rc : MPI_Wait(&r, MPI_STATUS_IGNORE);
      },
      post);
  char* out = static_cast<char*>(buf) + static_cast<std::size_t>(rank_ * segment) * dtype_size(dtype);
  scaled_from_float(mine, 1.0f / static_cast<float>(world_), out, segment, dtype);
}

void CpuBackend::allgather(void* buf, int64_t segment, Dtype dtype) {
  if (segment == 0 || world_ == 1) return;  // nothing to publish
  const int64_t bytes = segment * static_cast<int64_t>(dtype_size(dtype));
  require(bytes <= INT32_MAX, DMUON_ERR_NOT_SUPPORTED, "a Muon segment over 2 GiB per rank");
  const int n = static_cast<int>(bytes);
  run("MPI_Allgather of Muon parameters",
      [&] { return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, n, MPI_BYTE, comm_); },
      [&](MPI_Request* r) { return MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, n, MPI_BYTE, comm_, r); });
}

void CpuBackend::allreduce_sum_f64(double* buf, int count) {
  run("MPI_Allreduce of the gradient norm",
      [&] { return MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, comm_); },
      [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, comm_, r); });
}

}  // namespace dmuon
