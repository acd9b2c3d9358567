#include "core/storage.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace dmuon {

Storage::Storage(Backend& backend, const Layout& layout, bool masters) : backend_(&backend) {
  try {
    for (int d = 0; d < kNumDtypes; ++d) {
      const std::size_t es = dtype_size(static_cast<Dtype>(d));
      const int64_t na = layout.adam_elements[static_cast<std::size_t>(d)];
      adam[d].elements = na;
      adam[d].param = backend.allocate(static_cast<std::size_t>(na) * es);
      adam[d].grad = backend.allocate(static_cast<std::size_t>(na) * es);
      adam[d].exp_avg = static_cast<float*>(backend.allocate(static_cast<std::size_t>(na) * 4));
      adam[d].exp_avg_sq = static_cast<float*>(backend.allocate(static_cast<std::size_t>(na) * 4));
      const MuonSegmentLayout& m = layout.muon[static_cast<std::size_t>(d)];
      muon[d].segment_elements = m.segment_elements;
      muon[d].param = backend.allocate(static_cast<std::size_t>(m.total_elements()) * es);
      muon[d].grad = backend.allocate(static_cast<std::size_t>(m.total_elements()) * es);
      muon[d].momentum = static_cast<float*>(backend.allocate(static_cast<std::size_t>(m.segment_elements) * 4));
      if (masters && static_cast<Dtype>(d) == Dtype::bf16) {
        adam[d].master = static_cast<float*>(backend.allocate(static_cast<std::size_t>(na) * 4));
        muon[d].master = static_cast<float*>(backend.allocate(static_cast<std::size_t>(m.segment_elements) * 4));
      }
    }
    adam_steps = static_cast<int64_t*>(
        backend.allocate(sizeof(int64_t) * static_cast<std::size_t>(std::max(1, layout.num_adam_rows))));
    stats = static_cast<StepStats*>(backend.allocate(sizeof(StepStats)));
  } catch (...) {
    release();
    throw;
  }
}

void Storage::swap(Storage& other) noexcept {
  for (int d = 0; d < kNumDtypes; ++d) {
    std::swap(adam[d], other.adam[d]);
    std::swap(muon[d], other.muon[d]);
  }
  std::swap(adam_steps, other.adam_steps);
  std::swap(stats, other.stats);
  std::swap(backend_, other.backend_);
}

void Storage::release() noexcept {
  if (!backend_) return;
  for (int d = 0; d < kNumDtypes; ++d) {
    for (void* p : {adam[d].param, adam[d].grad, static_cast<void*>(adam[d].exp_avg),
                    static_cast<void*>(adam[d].exp_avg_sq), muon[d].param, muon[d].grad,
                    static_cast<void*>(muon[d].momentum), static_cast<void*>(adam[d].master),
                    static_cast<void*>(muon[d].master)})
      backend_->release(p);
    adam[d] = AdamBuffers{};
    muon[d] = MuonBuffers{};
  }
  backend_->release(adam_steps);
  backend_->release(stats);
  adam_steps = nullptr;
  stats = nullptr;
  backend_ = nullptr;
}

std::vector<StateBuffer> Storage::describe(const Layout& layout) const {
  std::vector<StateBuffer> out;
  for (int di = 0; di < kNumDtypes; ++di) {
    const Dtype d = static_cast<Dtype>(di);
    const std::size_t es = dtype_size(d);
    const int64_t nm = layout.muon[static_cast<std::size_t>(di)].total_elements();
    const int64_t seg = muon[di].segment_elements;
    const int64_t na = adam[di].elements;
    out.push_back({StateRole::param, Kind::muon, d, muon[di].param, nm, es, Extent::all_ranks});
    out.push_back({StateRole::momentum, Kind::muon, d, muon[di].momentum, seg, 4, Extent::own_segment});
    if (muon[di].master) out.push_back({StateRole::master, Kind::muon, d, muon[di].master, seg, 4, Extent::own_segment});
    out.push_back({StateRole::param, Kind::adam, d, adam[di].param, na, es, Extent::all_ranks});
    out.push_back({StateRole::exp_avg, Kind::adam, d, adam[di].exp_avg, na, 4, Extent::all_ranks});
    out.push_back({StateRole::exp_avg_sq, Kind::adam, d, adam[di].exp_avg_sq, na, 4, Extent::all_ranks});
    if (adam[di].master) out.push_back({StateRole::master, Kind::adam, d, adam[di].master, na, 4, Extent::all_ranks});
  }
  return out;
}

std::vector<MuonShapeBatch> muon_batches_for(const Plan& plan, int rank) {
  std::map<std::tuple<int, int64_t, int64_t>, std::size_t> index;
  std::vector<MuonShapeBatch> batches;
  for (std::size_t i = 0; i < plan.params.size(); ++i) {
    const ParamRecord& p = plan.params[i];
    if (p.kind != Kind::muon || p.owner != rank) continue;
    const auto key = std::make_tuple(static_cast<int>(p.dtype), p.rows(), p.cols());
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, batches.size()).first;
      batches.push_back(MuonShapeBatch{p.dtype, p.rows(), p.cols(), {}});
    }
    batches[it->second].matrices.push_back(
        MuonMatrix{p.offset, plan.layout.local_offset(p), static_cast<int>(i), 0.f, 1.f, 1});
  }
  return batches;
}

}  // namespace dmuon
