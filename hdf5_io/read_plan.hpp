// Which elements of which dataset a rank reads in a restore, and how the rest
// of each of its buffers arrives: a pure function of the file's canonical
// layout, the plan the optimizer will have, and the rank (tested alone in
// tests/checkpoint/test_read_plan.cpp).
//
// Every rank reads and verifies its own Muon matrices and an even share of
// each replicated dataset. The rest of a replicated dataset (the other ranks'
// shares) then comes either from the file again (ranks on one node, one page
// cache) or from the other ranks:
//   segments  Muon parameters: every rank's segment, gathered in place;
//   ranges    Adam buffers whose shares stay in order in the padded image
//             (the model registered in the order it was saved): disjoint
//             ranges of the image, gathered in place;
//   canonical any other Adam buffer: the shares gather in a canonical
//             buffer, then every parameter moves to its padded place.
#pragma once
#include <cstdint>
#include <vector>

#include "core/state.hpp"
#include "format.hpp"

namespace dmuon::ckpt {

enum class Completion { none, segments, ranges, canonical };

struct DatasetRead {
  StateRole role = StateRole::param;
  Kind kind = Kind::muon;
  Dtype dtype = Dtype::fp32;
  std::size_t element_size = 4;  // in the file and in memory
  int64_t total = 0;    // elements in the dataset
  int64_t staging = 0;  // elements of this rank's staging buffer
  int64_t image = 0;    // elements of the buffer it becomes (canonical: after placement)
  std::vector<Piece> own;     // this rank reads and verifies these, in file order
  std::vector<Piece> others;  // the other ranks' pieces, in file order (empty: nothing replicated)
  Completion completion = Completion::none;
  // ranges and canonical: rank q's elements [displs[q], displs[q] + counts[q])
  // of the staging buffer, gathered in place.
  std::vector<int64_t> counts, displs;
  // canonical: staging elements [file, file + count) move to image [mem, mem + count).
  std::vector<Piece> placement;
};

// The data datasets of a restore in read order: those completed from other
// ranks or the file first, this rank's own (the Muon momentum) last, so the
// completions run beside its read. `file` maps the registered parameters to
// their offsets in the file (Canonical::offset by registered id). `masters`:
// the fp32 master weights of the bf16 parameters are read too (the optimizer
// and the file both have them).
std::vector<DatasetRead> plan_reads(const Plan& plan, const Canonical& file, int rank, bool masters = false);

}  // namespace dmuon::ckpt
