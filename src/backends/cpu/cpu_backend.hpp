// The CPU backend: host memory, MPI collectives, loops and BLAS.
#pragma once
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.hpp"
#include "core/mapped_memory.hpp"

namespace dmuon {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(MPI_Comm comm);
  ~CpuBackend() override;
  const char* name() const override { return "cpu"; }

  void* allocate(std::size_t bytes) override;
  bool move_pages_into(void* dst, void* staged, std::size_t bytes) noexcept override;
  void release(void* p) noexcept override;
  void zero(void* p, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void upload(void* dst, const void* host, std::size_t bytes) override;
  void download(void* host, const void* src, std::size_t bytes) override;
  void synchronize() override {}

  // fp32 is all-reduced in place and left as the sum; bf16 is widened for
  // MPI and divided where it is rounded back, at no extra pass.
  bool allreduce_leaves_sum(Dtype dtype) const override { return dtype == Dtype::fp32; }
  void allreduce_gradients(void* buf, int64_t count, Dtype dtype) override;
  void reduce_scatter_average(void* buf, int64_t segment, Dtype dtype) override;
  void allgather(void* buf, int64_t segment, Dtype dtype) override;
  void allreduce_sum_f64(double* buf, int count) override;
  void set_collective_timeout(int milliseconds) override { timeout_ms_ = milliseconds; }

  void accumulate_sumsq(const void* buf, Dtype dtype, int64_t offset, int64_t count, double scale,
                        StepStats* stats) override;
  void finish_stats(StepStats* stats, double max_norm, int skip_nonfinite, int norm_computed,
                    bool adam_follows) override;
  void adam_update(const AdamBuffers (&buffers)[kNumDtypes], const float (&grad_scale)[kNumDtypes],
                   const AdamScalarRow* rows, int num_rows,
                   int64_t* steps, const StepStats* stats) override;
  void muon_update(const MuonBuffers (&buffers)[kNumDtypes], const std::vector<MuonShapeBatch>& batches,
                   const MuonHyper& hyper, const StepStats* stats) override;

 private:
  // One collective: `blocking` without a deadline, else `post` (non-blocking)
  // completed by the watchdog. A failure or a missed deadline poisons.
  void run(const char* what, const std::function<int()>& blocking, const std::function<int(MPI_Request*)>& post);

  MPI_Comm comm_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<float> scratch_;  // fp32 staging for bf16 collectives
  int timeout_ms_ = 0;          // 0: blocking collectives
  std::vector<float> muon_workspace_;  // Newton-Schulz matrices of one chunk (cpu_muon.cpp), kept between steps
  // Blocks from mmap (large ones and adopted ones) and their lengths.
  // Guarded: blocks may come and go on any thread.
  std::mutex mapped_mutex_;
  std::unordered_map<void*, std::size_t> mapped_;
  Unmapper unmapper_;
};

}  // namespace dmuon
