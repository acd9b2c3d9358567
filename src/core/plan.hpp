// The ownership plan and the flat layouts: the single home of where every
// parameter lives.
//
// Muon matrices are assigned to owner ranks by balancing Newton-Schulz cost
// (largest first onto the least-loaded rank), then laid out owner-major: the
// flat Muon buffer of a dtype is the concatenation over ranks of each rank's
// owned matrices, every rank's segment padded to the same length. One
// reduce-scatter then hands each owner its averaged gradients, and one
// all-gather publishes the updated matrices.
//
// Adam parameters are laid end to end per dtype, in registration order.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "core/registry.hpp"
#include "core/sizes.hpp"

namespace dmuon {

// Every parameter starts on a multiple of this many elements (64 bytes for
// fp32, 32 for bf16): 16-byte vector accesses on the GPU, no false sharing.
constexpr int64_t kAlignElements = 16;

static_assert(kAlignElements * 4 <= 64, "kMaxElements leaves room for one alignment's padding");

// n is at most kMaxElements (sizes.hpp), so the padding cannot wrap.
inline int64_t align_up(int64_t n, int64_t a = kAlignElements) { return (n + a - 1) / a * a; }

// Newton-Schulz cost of one iteration for an m x n matrix, up to a constant.
inline double newton_schulz_cost(int64_t m, int64_t n) {
  const double a = static_cast<double>(m < n ? m : n), b = static_cast<double>(m < n ? n : m);
  return a * a * b;
}

// Owner of each Muon matrix (index into `shapes`), deterministic for a given
// list and world size.
std::vector<int> plan_owners(const std::vector<std::array<int64_t, 2>>& shapes, int world);

struct MuonSegmentLayout {
  int64_t segment_elements = 0;  // per rank, padded: buffer = world * segment_elements
  int64_t total_elements() const { return segment_elements * world; }
  int world = 1;
};

struct Layout {
  std::array<MuonSegmentLayout, kNumDtypes> muon;  // per dtype
  std::array<int64_t, kNumDtypes> adam_elements{};  // per dtype
  int num_adam_rows = 0;

  // The owner-major arithmetic, written once: where `rank`'s segment starts
  // in a flat Muon buffer of dtype d, and a Muon matrix's offset inside its
  // owner's segment (the index into the owner's momentum).
  int64_t segment_start(Dtype d, int rank) const {
    return static_cast<int64_t>(rank) * muon[static_cast<std::size_t>(d)].segment_elements;
  }
  int64_t local_offset(const ParamRecord& p) const { return p.offset - segment_start(p.dtype, p.owner); }
};

// Fill owner / offset / adam_row of every parameter and return the buffer
// sizes. Throws DMUON_ERR_OUT_OF_MEMORY when a flat buffer would exceed
// kMaxElements (sizes.hpp); `params` may be partly filled then.
// With `owners` non-empty (one per Muon matrix, in registration order) that
// assignment is used instead of planning (a restored plan).
Layout plan_layout(std::vector<ParamRecord>& params, int world, const std::vector<int>& owners = {});

// Where every parameter lives for one world size. Built once by make_plan and
// not changed afterwards: a new plan is a new value.
struct Plan {
  std::vector<ParamRecord> params;  // registration order, owner/offset/adam_row set
  Layout layout;
  int world = 1;
  // Owner of each Muon matrix, in registration order.
  std::vector<int> owners() const;
};
std::vector<int> muon_owners(const std::vector<ParamRecord>& placed);
// The plan of `registered` on `world` ranks: `owners` (one per Muon matrix)
// when given, else balanced by Newton-Schulz cost (plan.hpp). Throws.
Plan make_plan(const std::vector<ParamRecord>& registered, int world, const std::vector<int>& owners = {});

}  // namespace dmuon
