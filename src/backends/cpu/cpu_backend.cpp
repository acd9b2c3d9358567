// CPU backend: memory and MPI collectives. bf16 has no MPI datatype, so bf16
// reductions go through an fp32 scratch buffer and round once at the end.
#include "backends/cpu/cpu_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "core/error.hpp"

namespace dmuon {

namespace {
void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(DMUON_ERR_MPI, std::string(what) + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

void to_float(const void* src, float* dst, int64_t n, Dtype d) {
  if (d == Dtype::fp32) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
    return;
  }
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
}

void from_float(const float* src, void* dst, int64_t n, Dtype d) {
  if (d == Dtype::fp32) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
    return;
  }
  auto* o = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16(src[i]);
}

// MPI counts are int: large buffers go in chunks.
constexpr int64_t kMaxChunk = int64_t{1} << 30;
}  // namespace

std::unique_ptr<Backend> make_cpu_backend(MPI_Comm comm) { return std::make_unique<CpuBackend>(comm); }

CpuBackend::CpuBackend(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_);
}

void* CpuBackend::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}
void CpuBackend::release(void* p) noexcept { std::free(p); }
void CpuBackend::zero(void* p, std::size_t bytes) { if (bytes) std::memset(p, 0, bytes); }
void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) { if (bytes && dst != src) std::memmove(dst, src, bytes); }
void CpuBackend::upload(void* dst, const void* host, std::size_t bytes) { copy(dst, host, bytes); }
void CpuBackend::download(void* host, const void* src, std::size_t bytes) { copy(host, src, bytes); }

void CpuBackend::allreduce_average(void* buf, int64_t count, Dtype dtype) {
  if (count == 0 || world_ == 1) return;  // the average of one rank is itself
  float* f = static_cast<float*>(buf);
  if (dtype == Dtype::bf16) {
    scratch_.resize(static_cast<std::size_t>(count));
    to_float(buf, scratch_.data(), count, dtype);
    f = scratch_.data();
  }
  for (int64_t at = 0; at < count; at += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - at));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, f + at, n, MPI_FLOAT, MPI_SUM, comm_), "MPI_Allreduce of gradients");
  }
  const float inv = 1.0f / static_cast<float>(world_);
  for (int64_t i = 0; i < count; ++i) f[i] *= inv;
  if (dtype == Dtype::bf16) from_float(f, buf, count, dtype);
}

void CpuBackend::reduce_scatter_average(void* buf, int64_t segment, Dtype dtype) {
  if (segment == 0) return;
  const int64_t total = segment * world_;
  scratch_.resize(static_cast<std::size_t>(total + segment));
  float* all = scratch_.data();
  float* mine = all + total;
  to_float(buf, all, total, dtype);
  require(segment <= kMaxChunk, DMUON_ERR_NOT_SUPPORTED, "a Muon segment over 2^30 elements per rank");
  check_mpi(MPI_Reduce_scatter_block(all, mine, static_cast<int>(segment), MPI_FLOAT, MPI_SUM, comm_),
            "MPI_Reduce_scatter_block of Muon gradients");
  const float inv = 1.0f / static_cast<float>(world_);
  for (int64_t i = 0; i < segment; ++i) mine[i] *= inv;
  char* out = static_cast<char*>(buf) + static_cast<std::size_t>(rank_ * segment) * dtype_size(dtype);
  from_float(mine, out, segment, dtype);
}

void CpuBackend::allgather(void* buf, int64_t segment, Dtype dtype) {
  if (segment == 0) return;
  const int64_t bytes = segment * static_cast<int64_t>(dtype_size(dtype));
  require(bytes <= INT32_MAX, DMUON_ERR_NOT_SUPPORTED, "a Muon segment over 2 GiB per rank");
  check_mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, static_cast<int>(bytes), MPI_BYTE, comm_),
            "MPI_Allgather of Muon parameters");
}

void CpuBackend::allreduce_sum_f64(double* buf, int count) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce of the gradient norm");
}

}  // namespace dmuon
