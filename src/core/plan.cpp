#include "core/plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace dmuon {

std::vector<int> plan_owners(const std::vector<std::array<int64_t, 2>>& shapes, int world) {
  std::vector<std::size_t> order(shapes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  auto cost = [&](std::size_t i) { return newton_schulz_cost(shapes[i][0], shapes[i][1]); };
  // Largest first; ties keep registration order so the plan is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost(a) > cost(b); });
  std::vector<double> load(static_cast<std::size_t>(world), 0.0);
  std::vector<int> owner(shapes.size(), 0);
  for (std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // first minimum: lowest rank
    owner[i] = static_cast<int>(least - load.begin());
    *least += cost(i);
  }
  return owner;
}

Layout plan_layout(std::vector<ParamRecord>& params, int world, const std::vector<int>& owners) {
  Layout layout;
  std::vector<std::array<int64_t, 2>> shapes;
  for (const auto& p : params)
    if (p.kind == Kind::muon) shapes.push_back({p.rows(), p.cols()});
  const std::vector<int> owner = owners.empty() ? plan_owners(shapes, world) : owners;

  // Local offsets inside each rank's segment, per dtype, in registration order.
  std::vector<std::array<int64_t, kNumDtypes>> used(static_cast<std::size_t>(world));
  for (auto& u : used) u.fill(0);
  std::size_t m = 0;
  int adam_row = 0;
  // Each end is checked before it is aligned: a sum at most kMaxElements
  // aligns without wrapping.
  const auto end_of = [](const ParamRecord& p, int64_t start) {
    return align_up(checked_add(start, p.numel, DMUON_ERR_OUT_OF_MEMORY,
                                std::string("the flat ") + kind_name(p.kind) + " " + dtype_name(p.dtype) +
                                    " storage would exceed " + std::to_string(kMaxElements) + " elements at " +
                                    p.describe()));
  };
  for (auto& p : params) {
    const int d = static_cast<int>(p.dtype);
    if (p.kind == Kind::muon) {
      p.owner = owner[m++];
      int64_t& cursor = used[static_cast<std::size_t>(p.owner)][static_cast<std::size_t>(d)];
      p.offset = cursor;  // local for now
      cursor = end_of(p, cursor);
    } else {
      p.owner = -1;
      p.adam_row = adam_row++;
      p.offset = layout.adam_elements[static_cast<std::size_t>(d)];
      layout.adam_elements[static_cast<std::size_t>(d)] = end_of(p, p.offset);
    }
  }
  layout.num_adam_rows = adam_row;
  for (int d = 0; d < kNumDtypes; ++d) {
    int64_t seg = 0;
    for (const auto& u : used) seg = std::max(seg, u[static_cast<std::size_t>(d)]);
    // The whole owner-major buffer (world segments) must fit too.
    checked_mul(seg, world, DMUON_ERR_OUT_OF_MEMORY,
                std::string("the flat Muon ") + dtype_name(static_cast<Dtype>(d)) + " storage (" +
                    std::to_string(world) + " segments of " + std::to_string(seg) + " elements) would exceed " +
                    std::to_string(kMaxElements) + " elements");
    layout.muon[static_cast<std::size_t>(d)].segment_elements = seg;
    layout.muon[static_cast<std::size_t>(d)].world = world;
  }
  for (auto& p : params)
    if (p.kind == Kind::muon) p.offset += layout.segment_start(p.dtype, p.owner);
  return layout;
}

std::vector<int> muon_owners(const std::vector<ParamRecord>& placed) {
  std::vector<int> out;
  for (const ParamRecord& p : placed)
    if (p.kind == Kind::muon) out.push_back(p.owner);
  return out;
}

std::vector<int> Plan::owners() const { return muon_owners(params); }

Plan make_plan(const std::vector<ParamRecord>& registered, int world, const std::vector<int>& owners) {
  Plan plan;
  plan.params = registered;
  plan.layout = plan_layout(plan.params, world, owners);
  plan.world = world;
  return plan;
}

}  // namespace dmuon
