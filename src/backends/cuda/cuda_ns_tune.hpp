// Which products a Newton-Schulz shape uses on the CUDA backend: the plain
// GEMMs, the symmetric products over p row blocks (cuda_ns_symmetric.hpp), or
// Gram Newton-Schulz (core/newton_schulz.hpp) on wide enough shapes,
// chosen at the shape's first use by timing each candidate on the GPU with a
// numerical cross-check, and remembered per backend and on disk
// (ns_tuning_cache.hpp); a shape of at most kNsFusedMaxK x kNsFusedMaxN runs
// the fused kernel (cuda_ns_fused.hpp) instead, untimed. Which products may
// be used is the optimizer's option muon_ns_symmetric (it changes results):
// DMUON_NS_SYMMETRIC_AUTO (default): fused or timed; DMUON_NS_SYMMETRIC_OFF:
// plain always; 2, 4 or 8: that block count wherever it fits (no timing);
// DMUON_NS_SYMMETRIC_GRAM (kNsGramBlocks): Gram Newton-Schulz wherever it
// fits (no timing). The cache
// comes from the environment:
//   DMUON_NS_CACHE      0 or off: neither read nor write the cache file
//   DMUON_CACHE_DIR     the cache directory (else $XDG_CACHE_HOME/dmuon, else ~/.cache/dmuon)
// and so do the lanes of NsTuneConfig::shape_lanes:
//   DMUON_NS_SHAPE_LANES  1 to kNsMaxShapeLanes (default kNsDefaultShapeLanes; 1: one order)
// This header needs no CUDA headers, so tests and benchmarks include it freely.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/ns_tuning_cache.hpp"
#include "core/newton_schulz.hpp"

namespace dmuon {

struct CudaStepState;
struct ShapeWork;
struct SymShape;

// Shapes with fewer rows (min(rows, cols)) are not timed: plain products.
constexpr long kNsTuneMinRows = 256;
// A symmetric candidate must be this much faster than plain to be chosen (and
// a cuBLASLt algorithm than the heuristic's first), so that timing noise does
// not flip a tie.
constexpr double kNsTuneMinGain = 0.03;
// Largest relative Frobenius difference from the plain result (per matrix,
// after the full iteration) a symmetric candidate may show.
constexpr double kNsTuneCheckTolerance = 0.03;

// Gram Newton-Schulz on the CUDA backend: its k x k matrices share the k x n
// scratch (gram_ns_fits), and every one of them starts 256-byte aligned, as
// the cuBLASLt heuristic assumes, when k is a multiple of 16.
inline bool ns_gram_possible(long k, long n) { return gram_ns_fits(k, n) && k % 16 == 0; }

// Most lanes DMUON_NS_SHAPE_LANES may ask for: each costs one or two cuBLAS workspaces.
constexpr int kNsMaxShapeLanes = 8;
// Lanes a step uses unless told otherwise (docs/decisions.md, "Muon shape
// batches in concurrent lanes", says why four).
constexpr int kNsDefaultShapeLanes = 4;

struct NsTuneConfig {
  bool cache = true;
  std::string cache_dir;
  // The Gram iteration's Q update beside R's update on a second stream
  // (core/newton_schulz.hpp); false keeps one order (tests compare the two).
  bool gram_beside = true;
  // A single matrix's Gram iteration takes the Frobenius normalisation into
  // its first products instead of a pass over X (cuda_muon.cu); false keeps
  // the pass (tests and benches compare the two).
  bool gram_defer_norm = true;
  // With it, the last product also applies the update to the parameter
  // (alpha -lr, beta the decay) instead of an update pass; false keeps the pass.
  bool gram_fuse_update = true;
  // Orders the step's Muon shape batches are spread over, round robin, so that
  // one shape's memory passes run beside another's products (cuda_muon.cu);
  // 1 keeps one order. Results are the same bit for bit either way.
  int shape_lanes = kNsDefaultShapeLanes;
  static NsTuneConfig from_environment();
};

class NsTuner {
 public:
  explicit NsTuner(int device);
  NsTuneConfig config;  // read from the environment at construction; tests may change it before the first step

  // What a shape uses, with the timings behind a timed choice (ms for
  // Newton-Schulz of the whole batch; 0 where not timed).
  struct Choice {
    int blocks = 0;           // 0: plain products, kNsGramBlocks: Gram, p: symmetric over p row blocks
    int best_sym_blocks = 0;  // fastest candidate other than plain that passed the check (0: none)
    bool fused = false;       // the fused kernel of a small shape (cuda_ns_fused.hpp)
    double plain_ms = 0, sym_ms = 0;
    // Per GEMM role (X X^T, A A, B X) of the chosen products: the cuBLASLt
    // candidate algorithm used (0: the heuristic's first), timed with them.
    int algo[kNsCacheAlgos] = {0, 0, 0};
    // For kernel_choices() (and so for checkpoints): the product and how it
    // was chosen, the same text whether timed now or read from the cache, so
    // that runs making the same choice write the same attribute.
    std::string note;
    std::string detail;       // the timings behind a timed choice (benchmarks, tests)
  };

  // Sets w.sym_blocks, w.sym, w.gram_note and w.gram_chosen, as `symmetric`
  // (options.muon_ns_symmetric) allows. When the shape must be timed this
  // synchronises the stream: it runs at the shape's first (eager) call,
  // never in a capture or a replayed step.
  void choose(CudaStepState& st, ShapeWork& w, int symmetric);

  // The choice made for a shape in this backend under DMUON_NS_SYMMETRIC_AUTO, or null.
  const Choice* choice(int64_t rows, int64_t cols, int count) const;
  std::string cache_path() const;  // empty when the cache is off or has no directory

  int shapes_timed = 0;   // shapes timed by this backend
  int cache_hits = 0;     // shapes whose choice came from the cache file

 private:
  Choice time_shape(CudaStepState& st, ShapeWork& w, bool& cacheable);
  void time_algorithms(CudaStepState& st, ShapeWork& w, Choice& c);
  void load_cache();
  std::string store_cache(const NsCacheKey& key, const NsCacheEntry& e);

  std::string file_name_;
  std::map<NsCacheKey, Choice> choices_;
  NsCacheEntries cached_;
  bool cache_loaded_ = false;
};

// The Newton-Schulz iterations of one shape's batch on its workspaces (X holds
// the normalised input), products symmetric when `sym` is given, or the Gram
// iteration when `gram` (then `sym` is unused; needs ns_gram_possible);
// returns the buffer holding the result (X or Xn). Enqueued on st.stream.
// With `input_scale` (Gram on a single matrix only: w.scales) X holds the
// input before its normalisation, which the first products apply.
// With `update` as well, the last product writes the Muon update into that
// parameter (no master weights; fp32 or bf16) where cuBLASLt offers a plan
// for it, and sets update->done; otherwise the result is returned as always.
struct NsParamUpdate {
  void* param = nullptr;  // the matrix's first element, 16-byte aligned
  bool fp32 = true;
  bool done = false;
};
uint16_t* ns_iterate(CudaStepState& st, ShapeWork& w, SymShape* sym, const std::vector<NsCoefficients>& coeffs,
                     bool gram = false, const float* input_scale = nullptr, NsParamUpdate* update = nullptr);

}  // namespace dmuon
