// Shared pieces of the CUDA benchmarks: building an optimizer from a list of
// parameters, filling it on the device, and timing steps with CUDA events on
// the optimizer's stream. Results are printed as "RESULT <key> <value>" lines
// that scripts/gpu_check.sh gathers into its table.
#pragma once
#include <functional>
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "dmuon/dmuon.h"
#include "support/param_spec.hpp"

namespace bench {

using Param = dmuon_test::ParamSpec;  // name, kind, dtype, shape

inline void check(int rc, const char* what, dmuon_context_t ctx = nullptr) {
  if (rc == DMUON_SUCCESS) return;
  std::fprintf(stderr, "%s failed: %s (%s)\n", what, dmuon_error_string(rc), dmuon_context_last_error(ctx));
  std::exit(1);
}
inline void cuda(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return;
  std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(rc));
  std::exit(1);
}

// Deterministic values in [-scale, scale) written on the device.
__global__ void fill_kernel(void* p, int64_t n, int bf16, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = scale * (static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f);
    if (bf16) {
      uint32_t bits;
      memcpy(&bits, &v, 4);
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    } else {
      static_cast<float*>(p)[i] = v;
    }
  }
}

inline void fill(void* p, int64_t n, int dtype, uint32_t seed, float scale, cudaStream_t s) {
  fill_kernel<<<1024, 256, 0, s>>>(p, n, dtype == DMUON_DTYPE_BF16, seed, scale);
  cuda(cudaGetLastError(), "fill_kernel");
}

struct Run {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  cudaStream_t stream = nullptr;
  Run(const std::vector<Param>& params, dmuon_options_t o) {
    cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    o.cuda_stream = stream;
    check(dmuon_context_create(MPI_COMM_WORLD, "cuda", &ctx), "dmuon_context_create");
    check(dmuon_optimizer_create(ctx, &o, &opt), "dmuon_optimizer_create", ctx);
    for (const Param& p : params)
      check(dmuon_register(opt, p.name.c_str(), p.kind, p.dtype, static_cast<int>(p.shape.size()), p.shape.data(), 1.0,
                           1.0, nullptr),
            "dmuon_register", ctx);
    check(dmuon_optimizer_finalize(opt), "dmuon_optimizer_finalize", ctx);
    for (std::size_t k = 0; k < params.size(); ++k) {
      void *d = nullptr, *g = nullptr;
      check(dmuon_param_view(opt, static_cast<int>(k), &d, &g), "dmuon_param_view", ctx);
      fill(d, params[k].numel(), params[k].dtype, 2 * k + 1, 0.5f, stream);
      fill(g, params[k].numel(), params[k].dtype, 2 * k + 2, 0.01f, stream);
    }
    cuda(cudaStreamSynchronize(stream), "fill");
  }
  ~Run() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
    cudaStreamDestroy(stream);
  }
  // Called before every timed or warm-up step (for example a metrics submission).
  std::function<void()> before_step;
  void step() {
    if (before_step) before_step();
    check(dmuon_step(opt), "dmuon_step", ctx);
  }
  // GPU milliseconds per step over `iters` steps after `warm` steps.
  double ms_per_step(int warm, int iters) {
    for (int i = 0; i < warm; ++i) step();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cuda(cudaEventRecord(a, stream), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) step();
    cuda(cudaEventRecord(b, stream), "cudaEventRecord");
    cuda(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / iters;
  }
  // Host microseconds per dmuon_step() call while a kernel holds the stream
  // (so the device's pace does not enter): the cost of enqueuing a step, over
  // `rounds` rounds of `calls` calls (each behind its own held stream): the
  // median call, the mean, and the mean first call of a round (a round follows
  // a long device-bound wait, as in a training loop). At most the scalar
  // ring's slots less one (7) calls fit in a round before the host waits.
  struct HostCost {
    double median_us = 0, mean_us = 0, first_us = 0;
  };
  HostCost host_cost(int calls, int rounds);
};

__global__ void hold_kernel(volatile int* flag, long long max_cycles) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < max_cycles) {
  }
}

// A kernel that keeps a stream busy until the host releases it, so that work
// enqueued behind it starts together and the host's pace does not enter the
// device's timings (or the device's the host's).
class StreamHold {
 public:
  StreamHold() {
    cuda(cudaHostAlloc(reinterpret_cast<void**>(&flag_), sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
    cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag_), flag_, 0), "cudaHostGetDevicePointer");
  }
  ~StreamHold() { cudaFreeHost(flag_); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  void hold(cudaStream_t stream) {
    *reinterpret_cast<volatile int*>(flag_) = 0;
    hold_kernel<<<1, 1, 0, stream>>>(dflag_, 4000000000LL);
  }
  void release() { *reinterpret_cast<volatile int*>(flag_) = 1; }

 private:
  int* flag_ = nullptr;
  int* dflag_ = nullptr;
};

// Host microseconds per call of `enqueue`, over `rounds` rounds of `calls`
// calls, each round behind a kernel that holds `stream` until the round is
// enqueued (so the device's pace does not enter).
inline Run::HostCost held_host_cost(cudaStream_t stream, const std::function<void()>& enqueue, int calls, int rounds) {
  StreamHold held;
  std::vector<double> all;
  Run::HostCost c;
  for (int r = 0; r < rounds; ++r) {
    held.hold(stream);
    for (int i = 0; i < calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      enqueue();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      all.push_back(us);
      c.mean_us += us;
      if (i == 0) c.first_us += us / rounds;
    }
    held.release();
    cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  c.mean_us /= static_cast<double>(all.size());
  std::sort(all.begin(), all.end());
  c.median_us = all[all.size() / 2];
  return c;
}

// Device microseconds per call of `enqueue`: `calls` calls queued behind a
// kernel holding `stream`, timed between events placed after the hold (so the
// host's pace does not enter); the best of `rounds` rounds.
inline double held_device_us(cudaStream_t stream, const std::function<void()>& enqueue, int calls, int rounds) {
  StreamHold held;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    held.hold(stream);
    cuda(cudaEventRecord(a, stream), "cudaEventRecord");
    for (int i = 0; i < calls; ++i) enqueue();
    cuda(cudaEventRecord(b, stream), "cudaEventRecord");
    held.release();
    cuda(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, 1e3 * ms / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

inline Run::HostCost Run::host_cost(int calls, int rounds) {
  return held_host_cost(stream, [this] { step(); }, calls, rounds);
}

// Parses the command line into the options of `desc` (which has --help).
// False when it asked for --help: the text is printed.
inline bool parse_options(int argc, char** argv, const boost::program_options::options_description& desc) {
  namespace po = boost::program_options;
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);
  if (!vm.count("help")) return true;
  std::cout << desc << "\n";
  return false;
}

// The command line of a bench whose one option is --iters (default: the
// value iters holds).
inline bool parse_iters(int argc, char** argv, const char* title, int& iters) {
  namespace po = boost::program_options;
  po::options_description desc(title);
  desc.add_options()("help", "this text")("iters", po::value(&iters)->default_value(iters), "timed steps");
  return parse_options(argc, argv, desc);
}

inline void result(const std::string& key, double value) { std::printf("RESULT %s %.6g\n", key.c_str(), value); }

}  // namespace bench
