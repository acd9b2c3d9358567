#include "read_plan.hpp"

#include <algorithm>

#include "transfer.hpp"

namespace dmuon::ckpt {
namespace {

std::vector<Piece> in_file_order(std::vector<Piece> pieces) {
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.file < b.file; });
  return merge_pieces(std::move(pieces));
}

DatasetRead dataset(StateRole role, Kind kind, Dtype d, int64_t total) {
  DatasetRead r;
  r.role = role;
  r.kind = kind;
  r.dtype = d;
  r.element_size = element_size(d, role);
  r.total = total;
  return r;
}

void muon_reads(const Plan& plan, const Canonical& file, Dtype d, int rank, bool masters, std::vector<DatasetRead>& out) {
  const int64_t seg = plan.layout.muon[static_cast<std::size_t>(d)].segment_elements;
  const int64_t total = file.muon_total[static_cast<std::size_t>(d)];
  DatasetRead param = dataset(StateRole::param, Kind::muon, d, total);
  param.own = in_file_order(muon_pieces(plan.params, plan.layout, file, d, rank, false));
  for (int q = 0; q < plan.world; ++q)
    if (q != rank) {
      const auto theirs = muon_pieces(plan.params, plan.layout, file, d, q, false);
      param.others.insert(param.others.end(), theirs.begin(), theirs.end());
    }
  param.others = in_file_order(std::move(param.others));
  param.staging = param.image = seg * plan.world;
  param.completion = Completion::segments;
  out.push_back(std::move(param));
  // The momentum, and the masters, are this rank's segment alone.
  for (const StateRole role : {StateRole::momentum, StateRole::master}) {
    if (role == StateRole::master && !masters) continue;
    DatasetRead own = dataset(role, Kind::muon, d, total);
    own.own = in_file_order(muon_pieces(plan.params, plan.layout, file, d, rank, true));
    own.staging = own.image = seg;
    out.push_back(std::move(own));
  }
}

void adam_reads(const Plan& plan, const Canonical& file, Dtype d, int rank, bool masters, std::vector<DatasetRead>& out) {
  const int world = plan.world;
  const int64_t total = file.adam_total[static_cast<std::size_t>(d)];
  const int64_t padded = plan.layout.adam_elements[static_cast<std::size_t>(d)];
  // Each rank's even share of the canonical elements, and the range of the
  // padded image it lands in; in order when consecutive ranks' ranges are.
  std::vector<std::vector<Piece>> share(static_cast<std::size_t>(world));
  std::vector<int64_t> counts, displs;
  bool in_order = true;
  for (int q = 0; q < world; ++q) {
    share[static_cast<std::size_t>(q)] = adam_pieces(plan.params, file, d, q, world);
    int64_t first = padded, last = 0;
    for (const Piece& p : share[static_cast<std::size_t>(q)]) {
      first = std::min(first, p.mem);
      last = std::max(last, p.mem + p.count);
    }
    if (first >= last) first = last = displs.empty() ? 0 : displs.back() + counts.back();
    in_order = in_order && (displs.empty() || first >= displs.back() + counts.back());
    displs.push_back(first);
    counts.push_back(last - first);
  }
  for (const StateRole role : {StateRole::param, StateRole::exp_avg, StateRole::exp_avg_sq, StateRole::master}) {
    if (role == StateRole::master && !masters) continue;
    DatasetRead r = dataset(role, Kind::adam, d, total);
    r.image = padded;
    if (in_order) {
      r.staging = padded;
      r.own = in_file_order(share[static_cast<std::size_t>(rank)]);
      for (int q = 0; q < world; ++q)
        if (q != rank) r.others.insert(r.others.end(), share[static_cast<std::size_t>(q)].begin(),
                                       share[static_cast<std::size_t>(q)].end());
      r.others = in_file_order(std::move(r.others));
      r.completion = Completion::ranges;
      r.counts = counts;
      r.displs = displs;
    } else {
      r.staging = total;
      for (int q = 0; q < world; ++q) {
        const auto [lo, hi] = even_share(total, q, world);
        if (q == rank) r.own = in_file_order({{lo, lo, hi - lo}});
        else if (hi > lo) r.others.push_back({lo, lo, hi - lo});
        r.displs.push_back(lo);
        r.counts.push_back(hi - lo);
      }
      r.others = in_file_order(std::move(r.others));
      r.completion = Completion::canonical;
      for (const int id : file.adam_params) {
        const ParamRecord& p = plan.params[static_cast<std::size_t>(id)];
        if (p.dtype == d) r.placement.push_back({file.offset[static_cast<std::size_t>(id)], p.offset, p.numel});
      }
    }
    out.push_back(std::move(r));
  }
}

}  // namespace

std::vector<DatasetRead> plan_reads(const Plan& plan, const Canonical& file, int rank, bool masters) {
  std::vector<DatasetRead> reads;
  for (int di = 0; di < kNumDtypes; ++di) {
    const Dtype d = static_cast<Dtype>(di);
    const bool m = masters && d == Dtype::bf16;
    if (file.muon_total[static_cast<std::size_t>(di)] > 0) muon_reads(plan, file, d, rank, m, reads);
    if (file.adam_total[static_cast<std::size_t>(di)] > 0) adam_reads(plan, file, d, rank, m, reads);
  }
  std::stable_partition(reads.begin(), reads.end(), [](const DatasetRead& r) { return r.completion != Completion::none; });
  return reads;
}

}  // namespace dmuon::ckpt
