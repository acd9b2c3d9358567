// The choice of Newton-Schulz products per shape (cuda_ns_tune.hpp): plain
// GEMMs, symmetric products over 2, 4 or 8 row blocks, or Gram Newton-Schulz, timed on the GPU at a
// shape's first use, cross-checked against the plain result, kept per backend
// and in a versioned cache file.
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_block_sum.cuh"
#include "backends/cuda/cuda_graph_exec.hpp"
#include "backends/cuda/cuda_ns_fused.hpp"
#include "backends/cuda/cuda_ns_symmetric.hpp"
#include "backends/cuda/cuda_ns_tune.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "backends/cuda/cuda_pdl.cuh"

namespace dmuon {

namespace {

constexpr int kCheckBlocks = 64;  // per matrix: fixed, so the check sums in a fixed order
constexpr int kRounds = 3;        // timed rounds over the candidates (best of)
constexpr float kTargetMs = 5.f;  // device time per candidate and round
constexpr float kAlgoTargetMs = 1.f;  // the same for one GEMM's algorithm candidates
// Shapes whose timed plain iteration (five steps) takes less keep the
// heuristic's first algorithms: there the candidates differ by less than what
// separates a timed loop from a step, and the picks that timed faster ran
// slower inside the step (docs/decisions.md, "Algorithm timing").
constexpr double kAlgoMinPlainMs = 0.1;
static_assert(kNsCacheAlgos == kNsGemmRoles, "the cache keeps one algorithm per GEMM role");
static_assert(kNsGramBlocks == DMUON_NS_SYMMETRIC_GRAM, "muon_ns_symmetric forces Gram with the cache's value");

// A fixed pseudo-random input: uniform in [-s, s) with s = 0.9 sqrt(3/(k n)),
// so each matrix's Frobenius norm is about 0.9 and its spectrum inside the
// iteration's interval (what the normalisation of a real step guarantees).
__global__ void tune_fill_kernel(uint16_t* X, int64_t total, float scale) {
  await_prerequisite_kernels();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) * 2246822519u ^ 0x9e3779b9u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    X[i] = float_to_bf16(scale * (static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f));
  }
}

// Per matrix (blockIdx.y): partial sums of (a - b)^2 and b^2.
__global__ void tune_diff_kernel(const uint16_t* a, const uint16_t* b, int64_t numel, double* partials) {
  await_prerequisite_kernels();
  const uint16_t* x = a + blockIdx.y * numel;
  const uint16_t* y = b + blockIdx.y * numel;
  double d2 = 0, r2 = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < numel; i += int64_t(gridDim.x) * kThreads) {
    const double u = bf16_to_float(x[i]), v = bf16_to_float(y[i]);
    d2 += (u - v) * (u - v);
    r2 += v * v;
  }
  const double sd = block_sum(d2);
  __syncthreads();  // block_sum's shared array is reused by the next sum
  const double sr = block_sum(r2);
  if (threadIdx.x == 0) {
    partials[2 * (blockIdx.y * gridDim.x + blockIdx.x)] = sd;
    partials[2 * (blockIdx.y * gridDim.x + blockIdx.x) + 1] = sr;
  }
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string product_name(int blocks) {
  if (blocks == kNsGramBlocks) return "gram_ns";
  return blocks ? "sym_blocks" + std::to_string(blocks) : "cublas_gemm";
}

// Whether the candidate `blocks` (plain, Gram or p row blocks) fits a k x n shape.
bool candidate_fits(int blocks, long k, long n) {
  if (blocks == 0) return true;
  return blocks == kNsGramBlocks ? ns_gram_possible(k, n) : sym_blocks_possible(k, blocks);
}

std::string ms_text(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", ms);
  return b;
}

// Device resources of one timing, released whatever happens.
struct TuneScratch {
  cudaStream_t stream = nullptr;
  uint16_t* ref = nullptr;
  double* partials = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<cudaGraphExec_t> execs;
  ~TuneScratch() {
    if (stream) cudaStreamSynchronize(stream);  // nothing may still use what goes
    for (cudaGraphExec_t e : execs)
      if (e) cudaGraphExecDestroy(e);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(ref);
    cudaFree(partials);
  }
};

}  // namespace

NsTuneConfig NsTuneConfig::from_environment() {
  NsTuneConfig c;
  const std::string cache = env("DMUON_NS_CACHE");
  c.cache = !(cache == "0" || cache == "off");
  c.cache_dir = ns_cache_dir_from_environment();
  // A count of lanes, 1 to kNsMaxShapeLanes; anything else keeps the default.
  const std::string lanes = env("DMUON_NS_SHAPE_LANES");
  char* end = nullptr;
  const long n = std::strtol(lanes.c_str(), &end, 10);
  if (!lanes.empty() && *end == '\0' && n >= 1 && n <= kNsMaxShapeLanes) c.shape_lanes = static_cast<int>(n);
  return c;
}

NsTuner::NsTuner(int device) : config(NsTuneConfig::from_environment()) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return;  // no file name: the cache stays off
  }
  file_name_ = ns_cache_file_name(prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                                  static_cast<long>(cublasLtGetVersion()));
}

void NsTunerDeleter::operator()(NsTuner* t) const noexcept { delete t; }

NsTuner& CudaBackend::ns_tuner() {
  if (!ns_tuner_) ns_tuner_.reset(new NsTuner(device_));
  return *ns_tuner_;
}

std::string NsTuner::cache_path() const {
  if (!config.cache || config.cache_dir.empty() || file_name_.empty()) return "";
  return config.cache_dir + "/" + file_name_;
}

const NsTuner::Choice* NsTuner::choice(int64_t rows, int64_t cols, int count) const {
  auto it = choices_.find(NsCacheKey{rows, cols, count});
  return it == choices_.end() ? nullptr : &it->second;
}

void NsTuner::load_cache() {
  if (cache_loaded_) return;
  cache_loaded_ = true;
  const std::string path = cache_path();
  if (!path.empty() && !ns_cache_read(path, cached_)) cached_.clear();  // missing or damaged: as if empty
}

std::string NsTuner::store_cache(const NsCacheKey& key, const NsCacheEntry& e) {
  const std::string path = cache_path();
  if (path.empty()) return "";
  cached_[key] = e;
  // Keep what other processes wrote meanwhile (ranks of a node share the file).
  NsCacheEntries merged;
  if (!ns_cache_read(path, merged)) merged.clear();
  for (const auto& kv : cached_) merged[kv.first] = kv.second;
  std::string why;
  if (!ns_cache_write(path, merged, why)) return "; cache not written: " + why;
  return "";
}

namespace {
// The shape's products as chosen: the symmetric plans for c.blocks (none for
// plain) and the algorithm of each GEMM role. Once per choice: a second call
// for the same block count keeps what the first set up.
void set_up_products(CudaStepState& st, ShapeWork& w, NsTuner::Choice& c) {
  std::copy(std::begin(c.algo), std::end(c.algo), std::begin(w.algo));
  if (w.sym && w.sym_blocks == c.blocks) return;
  w.sym.reset();
  w.sym_blocks = c.blocks == kNsGramBlocks ? kNsGramBlocks : 0;  // Gram needs no plans of its own
  if (!c.blocks || c.blocks == kNsGramBlocks) return;
  try {
    w.sym = make_sym_shape(st, w, c.blocks);
    w.sym_blocks = c.blocks;
  } catch (const Error& e) {
    cudaGetLastError();
    c.note = "cublas_gemm (" + product_name(c.blocks) + " could not be set up: " + e.what() + ")";
    c.blocks = 0;
    for (int& a : c.algo) a = 0;
    std::copy(std::begin(c.algo), std::end(c.algo), std::begin(w.algo));
  }
}
}  // namespace

void NsTuner::choose(CudaStepState& st, ShapeWork& w, int symmetric) {
  const long k = static_cast<long>(std::min(w.rows, w.cols)), n = static_cast<long>(std::max(w.rows, w.cols));
  const NsCacheKey key{w.rows, w.cols, w.count};
  Choice c;
  auto fits_any = [&] {
    for (int p : kSymBlockCounts)
      if (sym_blocks_possible(k, p)) return true;
    return ns_gram_possible(k, n);
  };
  if (symmetric == DMUON_NS_SYMMETRIC_OFF) {
    c.note = "cublas_gemm (symmetric products off: muon_ns_symmetric=0)";
  } else if (symmetric > 0) {
    const int p = symmetric;
    if (candidate_fits(p, k, n)) {
      c.blocks = p;
      c.note = product_name(p) + " (forced: muon_ns_symmetric=" + std::to_string(p) + ")";
    } else {
      c.note = "cublas_gemm (forced " + product_name(p) + " does not fit " +
               (p == kNsGramBlocks ? std::to_string(w.rows) + "x" + std::to_string(w.cols)
                                   : std::to_string(k) + " rows") +
               ")";
    }
  } else if ((c.fused = ns_fused_fits(w.rows, w.cols))) {
    c.note = "fused_small (one kernel, not timed)";
  } else if (k < kNsTuneMinRows) {
    c.note = "cublas_gemm (under " + std::to_string(kNsTuneMinRows) + " rows: not timed)";
  } else if (!fits_any()) {
    c.note = "cublas_gemm (no 2, 4 or 8 equal row blocks of a multiple of 8 rows in " + std::to_string(k) +
             ", too narrow for Gram)";
  } else if (const Choice* known = choice(w.rows, w.cols, w.count)) {
    c = *known;
  } else {
    load_cache();
    auto hit = cached_.find(key);
    if (hit != cached_.end() && candidate_fits(hit->second.blocks, k, n)) {
      ++cache_hits;
      c.blocks = hit->second.blocks;
      c.best_sym_blocks = hit->second.best_symmetric_blocks;
      c.plain_ms = hit->second.plain_ms;
      c.sym_ms = hit->second.symmetric_ms;
      std::copy(std::begin(hit->second.algo), std::end(hit->second.algo), std::begin(c.algo));
      c.note = product_name(c.blocks) + " (timed choice)";
      c.detail = "cache: plain " + ms_text(c.plain_ms) + ", best symmetric " +
                 (c.best_sym_blocks ? product_name(c.best_sym_blocks) + " " + ms_text(c.sym_ms) : std::string("none"));
    } else {
      bool cacheable = false;
      try {
        c = time_shape(st, w, cacheable);
      } catch (const Error& e) {  // a failed timing costs the symmetric products, not the step
        cudaGetLastError();
        c = Choice{};
        c.note = std::string("cublas_gemm (not timed: ") + e.what() + ")";
        cacheable = false;
      }
      ++shapes_timed;
      if (cacheable) {
        // The algorithms are timed on the products chosen, as set up for the steps.
        set_up_products(st, w, c);
        try {
          time_algorithms(st, w, c);
        } catch (const Error& e) {  // the heuristic's first algorithms then, not cached
          cudaGetLastError();
          w.record = nullptr;
          for (int& a : c.algo) a = 0;
          c.detail += std::string("; algorithms not timed: ") + e.what();
          cacheable = false;
        }
      }
      if (cacheable) {
        NsCacheEntry e{c.blocks, c.best_sym_blocks, c.plain_ms, c.sym_ms};
        std::copy(std::begin(c.algo), std::end(c.algo), std::begin(e.algo));
        c.note += store_cache(key, e);
      }
    }
  }
  set_up_products(st, w, c);
  // Only what the option left to this backend is shared with its other
  // optimizers: a forced or disabled choice is one optimizer's own.
  if (symmetric == DMUON_NS_SYMMETRIC_AUTO) choices_[key] = c;
  w.fused = c.fused;
  w.gram_note = c.note;
  w.gram_chosen = true;
}

NsTuner::Choice NsTuner::time_shape(CudaStepState& st, ShapeWork& w, bool& cacheable) {
  cacheable = false;
  const long k = static_cast<long>(std::min(w.rows, w.cols)), n = static_cast<long>(std::max(w.rows, w.cols));
  const int64_t numel = int64_t(k) * n, total = numel * w.count;
  const std::vector<NsCoefficients> coeffs = ns_coefficients(DMUON_NS_QUINTIC, 5);
  const float scale = 0.9f * static_cast<float>(std::sqrt(3.0 / (double(k) * double(n))));
  const unsigned fill_blocks = static_cast<unsigned>(std::min<int64_t>(4096, (total + kThreads - 1) / kThreads));
  auto fill = [&] {
    tune_fill_kernel<<<fill_blocks, kThreads, 0, st.stream>>>(w.X, total, scale);
    launch_check("tune_fill_kernel");
  };
  Choice c;
  std::vector<int> cand = {0};
  for (int p : kSymBlockCounts)
    if (sym_blocks_possible(k, p)) cand.push_back(p);
  if (ns_gram_possible(k, n)) cand.push_back(kNsGramBlocks);
  const std::size_t nc = cand.size();
  std::vector<SymShapePtr> syms(nc);
  std::vector<std::string> rejected(nc);
  std::vector<double> check(nc, 0.0), best(nc, 1e300);

  TuneScratch t;
  t.stream = st.stream;
  if (cudaMalloc(&t.ref, sizeof(uint16_t) * total) != cudaSuccess ||
      cudaMalloc(&t.partials, sizeof(double) * 2 * kCheckBlocks * w.count) != cudaSuccess) {
    cudaGetLastError();
    c.note = "cublas_gemm (not timed: no device memory for the cross-check)";
    return c;
  }
  cuda_check(cudaEventCreate(&t.e0), "cudaEventCreate (tuning)");
  cuda_check(cudaEventCreate(&t.e1), "cudaEventCreate (tuning)");

  // Cross-check: every symmetric candidate against the plain result of the same input.
  fill();
  const uint16_t* out = ns_iterate(st, w, nullptr, coeffs);
  cuda_check(cudaMemcpyAsync(t.ref, out, sizeof(uint16_t) * total, cudaMemcpyDeviceToDevice, st.stream),
             "cudaMemcpyAsync (tuning reference)");
  std::vector<double> host(2 * kCheckBlocks * w.count);
  for (std::size_t i = 1; i < nc; ++i) {
    try {
      if (cand[i] != kNsGramBlocks) syms[i] = make_sym_shape(st, w, cand[i]);
      fill();
      out = ns_iterate(st, w, syms[i].get(), coeffs, cand[i] == kNsGramBlocks);
      tune_diff_kernel<<<dim3(kCheckBlocks, w.count), kThreads, 0, st.stream>>>(out, t.ref, numel, t.partials);
      launch_check("tune_diff_kernel");
      cuda_check(cudaMemcpyAsync(host.data(), t.partials, sizeof(double) * host.size(), cudaMemcpyDeviceToHost, st.stream),
                 "cudaMemcpyAsync (tuning check)");
      cuda_check(cudaStreamSynchronize(st.stream), "cudaStreamSynchronize (tuning check)");
      double worst = 0;
      for (int b = 0; b < w.count; ++b) {
        double d2 = 0, r2 = 0;
        for (int j = 0; j < kCheckBlocks; ++j) {
          d2 += host[2 * (b * kCheckBlocks + j)];
          r2 += host[2 * (b * kCheckBlocks + j) + 1];
        }
        const double rel = r2 > 0 ? std::sqrt(d2 / r2) : (d2 > 0 ? 1e300 : 0.0);
        worst = std::isfinite(rel) ? std::max(worst, rel) : 1e300;
      }
      check[i] = worst;
      if (!(worst <= kNsTuneCheckTolerance)) {
        char b[64];
        std::snprintf(b, sizeof b, "%.3g", worst);
        rejected[i] = std::string("differs from plain by ") + b;
      }
    } catch (const Error& e) {
      cudaGetLastError();
      rejected[i] = e.what();
    }
  }

  // Timing: each candidate (input fill and the iterations) captured once and
  // replayed, as steps run it; GPU time between events, best of kRounds.
  t.execs.assign(nc, nullptr);
  for (std::size_t i = 0; i < nc; ++i) {
    if (!rejected[i].empty()) continue;
    cuda_check(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture (tuning)");
    std::string why;
    try {
      fill();
      ns_iterate(st, w, syms[i].get(), coeffs, cand[i] == kNsGramBlocks);
    } catch (const Error& e) {
      why = e.what();
    }
    cudaGraph_t g = nullptr;
    cudaError_t rc = cudaStreamEndCapture(st.stream, &g);
    if (rc == cudaSuccess && why.empty()) rc = instantiate_replayed_graph(&t.execs[i], g, st.stream);
    if (g) cudaGraphDestroy(g);
    if (rc != cudaSuccess || !why.empty()) {
      cudaGetLastError();
      rejected[i] = why.empty() ? std::string("capture: ") + cudaGetErrorString(rc) : why;
      t.execs[i] = nullptr;
    }
  }
  if (!t.execs[0]) {
    c.note = "cublas_gemm (not timed: " + rejected[0] + ")";
    return c;
  }
  for (std::size_t i = 0; i < nc; ++i)  // first launches upload the graphs
    if (t.execs[i]) cuda_check(cudaGraphLaunch(t.execs[i], st.stream), "cudaGraphLaunch (tuning)");
  auto timed = [&](cudaGraphExec_t e, int reps) {
    cuda_check(cudaEventRecord(t.e0, st.stream), "cudaEventRecord (tuning)");
    for (int r = 0; r < reps; ++r) cuda_check(cudaGraphLaunch(e, st.stream), "cudaGraphLaunch (tuning)");
    cuda_check(cudaEventRecord(t.e1, st.stream), "cudaEventRecord (tuning)");
    cuda_check(cudaEventSynchronize(t.e1), "cudaEventSynchronize (tuning)");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, t.e0, t.e1), "cudaEventElapsedTime (tuning)");
    return double(ms) / reps;
  };
  const double once = timed(t.execs[0], 1);
  const int reps = std::max(1, std::min(50, static_cast<int>(kTargetMs / std::max(once, 1e-3))));
  for (int round = 0; round < kRounds; ++round)
    for (std::size_t i = 0; i < nc; ++i)
      if (t.execs[i]) best[i] = std::min(best[i], timed(t.execs[i], reps));

  c.plain_ms = best[0];
  for (std::size_t i = 1; i < nc; ++i)
    if (t.execs[i] && (c.best_sym_blocks == 0 || best[i] < c.sym_ms)) {
      c.best_sym_blocks = cand[i];
      c.sym_ms = best[i];
    }
  if (c.best_sym_blocks && c.sym_ms <= c.plain_ms * (1.0 - kNsTuneMinGain)) c.blocks = c.best_sym_blocks;
  if (!c.best_sym_blocks) c.sym_ms = 0;
  std::string detail = "timed: plain " + ms_text(c.plain_ms);
  for (std::size_t i = 1; i < nc; ++i) {
    detail += ", " + product_name(cand[i]) + " ";
    if (!rejected[i].empty()) {
      detail += "rejected (" + rejected[i] + ")";
      continue;
    }
    char b[64];
    std::snprintf(b, sizeof b, " (check %.2g)", check[i]);
    detail += ms_text(best[i]) + b;
  }
  c.note = product_name(c.blocks) + " (timed choice)";
  c.detail = detail;
  cacheable = true;
  return c;
}

// Each GEMM role of the chosen products, once per candidate algorithm of its
// plan (cuBLASLt's heuristic, best first): the three calls recorded from one
// iteration, repeated in their order on the same operands (no call's output
// is its own input, so repeating them changes nothing), the role timed with
// the candidate and the others with their picks so far. Each call reads what
// the one before wrote, as in a step: a call repeated alone timed the
// candidates' throughput, and for small shapes that picked algorithms slower
// inside the iteration (docs/decisions.md). The fastest wins when it beats
// the heuristic's first by kNsTuneMinGain. Every candidate is a plain
// cuBLASLt matmul, deterministic for a given device and cuBLAS build, so
// eager and replayed steps still agree bit for bit. Synchronises the stream:
// runs only at the shape's first (eager) use.
void NsTuner::time_algorithms(CudaStepState& st, ShapeWork& w, Choice& c) {
  for (int& a : c.algo) a = 0;
  std::copy(std::begin(c.algo), std::end(c.algo), std::begin(w.algo));
  // The Gram iteration's products do not follow the three roles of the plain
  // one (one role would name GEMMs of several shapes): the heuristic's first.
  if (w.sym_blocks == kNsGramBlocks) {
    c.detail += "; algorithms: the heuristic's first (Gram)";
    return;
  }
  if (c.plain_ms < kAlgoMinPlainMs) {
    c.detail += "; algorithms: the heuristic's first (plain iteration under " + ms_text(kAlgoMinPlainMs) + ")";
    return;
  }
  const long k = static_cast<long>(std::min(w.rows, w.cols)), n = static_cast<long>(std::max(w.rows, w.cols));
  const int64_t total = int64_t(k) * n * w.count;
  const float scale = 0.9f * static_cast<float>(std::sqrt(3.0 / (double(k) * double(n))));
  const unsigned fill_blocks = static_cast<unsigned>(std::min<int64_t>(4096, (total + kThreads - 1) / kThreads));
  tune_fill_kernel<<<fill_blocks, kThreads, 0, st.stream>>>(w.X, total, scale);
  launch_check("tune_fill_kernel");
  NsGemmCall rec[kNsGemmRoles];
  w.record = rec;
  ns_iterate(st, w, w.sym.get(), ns_coefficients(DMUON_NS_QUINTIC, 5));
  w.record = nullptr;

  TuneScratch t;
  t.stream = st.stream;
  cuda_check(cudaEventCreate(&t.e0), "cudaEventCreate (tuning)");
  cuda_check(cudaEventCreate(&t.e1), "cudaEventCreate (tuning)");
  static const char* const kRole[kNsGemmRoles] = {"XXt", "AA", "BX"};
  std::string detail = "; algorithms";
  for (int r = 0; r < kNsGemmRoles; ++r) {
    const NsGemmCall& g = rec[r];
    if (!g.valid || !g.candidates || g.candidates->size() < 2) {
      detail += std::string(" ") + kRole[r] + " 0 (one candidate)";
      continue;
    }
    const std::vector<cublasLtMatmulAlgo_t>& cand = *g.candidates;
    auto call = [&](const NsGemmCall& h, const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(st.lt, h.op, &h.alpha, h.A, h.a, h.B, h.b, &h.beta, h.C, h.c, h.D, h.c, &algo,
                            st.cublas_workspace, kCublasWorkspace, st.stream);
    };
    // One call each: a candidate cuBLASLt refuses (before enqueuing) drops out.
    std::vector<bool> ok(cand.size());
    for (std::size_t i = 0; i < cand.size(); ++i) ok[i] = call(g, cand[i]) == CUBLAS_STATUS_SUCCESS;
    cuda_check(cudaStreamSynchronize(st.stream), "cudaStreamSynchronize (algorithm timing)");
    if (!ok[0]) {
      detail += std::string(" ") + kRole[r] + " 0 (first candidate refused)";
      continue;
    }
    auto iteration = [&](std::size_t i) {
      for (int q = 0; q < kNsGemmRoles; ++q) {
        const NsGemmCall& h = rec[q];
        if (q == r)
          cublas_check(call(h, cand[i]), "cublasLtMatmul (algorithm timing)");
        else if (h.valid && h.candidates && !h.candidates->empty())
          cublas_check(call(h, algo_at(*h.candidates, c.algo[q])), "cublasLtMatmul (algorithm timing)");
      }
    };
    auto timed = [&](std::size_t i, int reps) {
      cuda_check(cudaEventRecord(t.e0, st.stream), "cudaEventRecord (tuning)");
      for (int q = 0; q < reps; ++q) iteration(i);
      cuda_check(cudaEventRecord(t.e1, st.stream), "cudaEventRecord (tuning)");
      cuda_check(cudaEventSynchronize(t.e1), "cudaEventSynchronize (tuning)");
      float ms = 0;
      cuda_check(cudaEventElapsedTime(&ms, t.e0, t.e1), "cudaEventElapsedTime (tuning)");
      return double(ms) / reps;
    };
    const double once = timed(0, 1);
    const int reps = std::max(1, std::min(200, static_cast<int>(kAlgoTargetMs / std::max(once, 1e-3))));
    std::vector<double> best(cand.size(), 1e300);
    for (int round = 0; round < kRounds; ++round)
      for (std::size_t i = 0; i < cand.size(); ++i)
        if (ok[i]) best[i] = std::min(best[i], timed(i, reps));
    std::size_t pick = 0;
    for (std::size_t i = 1; i < cand.size(); ++i)
      if (ok[i] && best[i] < best[pick]) pick = i;
    if (best[pick] > best[0] * (1.0 - kNsTuneMinGain)) pick = 0;
    c.algo[r] = static_cast<int>(pick);
    char b[96];
    std::snprintf(b, sizeof b, " %s %d of %zu (iteration %.4f ms, first %.4f)", kRole[r], c.algo[r], cand.size(), best[pick], best[0]);
    detail += b;
  }
  std::copy(std::begin(c.algo), std::end(c.algo), std::begin(w.algo));
  c.detail += detail;
}

}  // namespace dmuon
