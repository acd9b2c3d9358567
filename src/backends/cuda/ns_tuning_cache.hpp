// The on-disk cache of Newton-Schulz kernel choices (CUDA backend): which
// product (plain GEMM, symmetric over p row blocks, or Gram Newton-Schulz) a matrix shape uses, as
// timed on one device model with one cuBLAS build. Plain C++ with no CUDA in
// it, so its parsing and writing are tested on machines without a GPU.
//
// File: <dir>/ns-tuning-v<format>-<device>-cc<major><minor>-<sms>sm-cublas<version>.txt
//   dmuon-ns-tuning v4
//   <rows> <cols> <count> <blocks> <best_symmetric_blocks> <plain_ms> <symmetric_ms> <algo0> <algo1> <algo2>
//   ...
// blocks 0 means the plain product, 1 Gram Newton-Schulz (kNsGramBlocks),
// 2/4/8 the symmetric products; best_symmetric_blocks is the fastest other
// candidate than plain that passed the check (0: none), and the times are what
// the tuning measured for plain and for that candidate (information only).
// algo0..2 index the cuBLASLt heuristic's candidate algorithms of the three
// GEMM roles of an iteration (X X^T, A A, B X) in the chosen products (0: the
// heuristic's first). Anything that does not parse makes the whole file count
// as absent: a damaged cache costs a re-tuning, never an error. Version 1
// files (no algorithms), version 2 (no Gram candidate) and version 3
// (algorithms timed one call at a time) have another name and are not read:
// their shapes are timed again.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace dmuon {

constexpr int kNsCacheFormat = 4;  // 4: the algorithm picks timed inside the iteration (cuda_ns_tune.cu)
constexpr int kNsGramBlocks = 1;  // the `blocks` value of Gram Newton-Schulz
constexpr int kNsCacheAlgos = 3;         // GEMM roles of an iteration
constexpr int kNsCacheMaxAlgoIndex = 63;  // larger indices do not parse

struct NsCacheKey {
  int64_t rows = 0, cols = 0;
  int count = 0;
  bool operator<(const NsCacheKey& o) const { return std::tie(rows, cols, count) < std::tie(o.rows, o.cols, o.count); }
};

struct NsCacheEntry {
  int blocks = 0;             // 0: plain products; 1: Gram; p: symmetric products over p row blocks
  int best_symmetric_blocks = 0;
  double plain_ms = 0;        // Newton-Schulz of the whole batch, as timed
  double symmetric_ms = 0;    // best symmetric candidate (0: none was possible)
  int algo[kNsCacheAlgos] = {0, 0, 0};  // per GEMM role: index among the heuristic's candidates
};

using NsCacheEntries = std::map<NsCacheKey, NsCacheEntry>;

// Directory of the cache: $DMUON_CACHE_DIR, else $XDG_CACHE_HOME/dmuon, else
// $HOME/.cache/dmuon; empty when none of them is set.
std::string ns_cache_dir_from_environment();

// The file name (no directory) for a device and a cuBLAS version; characters
// of the device name outside [A-Za-z0-9._-] become '_'.
std::string ns_cache_file_name(const std::string& device_name, int cc_major, int cc_minor, int sms, long cublas_version);

// Parses the text of a cache file. Returns false (and leaves `out` empty) when
// the text is not a complete, well-formed file of this format.
bool ns_cache_parse(const std::string& text, NsCacheEntries& out);
std::string ns_cache_format(const NsCacheEntries& entries);

// Reads `path`; false when it is missing, unreadable or malformed.
bool ns_cache_read(const std::string& path, NsCacheEntries& out);

// Writes `entries` to `path` atomically (a temporary file in the same
// directory, then rename), creating the directory (and its parents) if
// needed. Returns false with a reason in `why`; never throws.
bool ns_cache_write(const std::string& path, const NsCacheEntries& entries, std::string& why);

}  // namespace dmuon
