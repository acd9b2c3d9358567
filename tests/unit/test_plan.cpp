// The ownership plan: deterministic, balanced by Newton-Schulz cost, and an
// owner-major layout whose per-rank segments are equal and non-overlapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/plan.hpp"

using namespace dmuon;

namespace {

ParamRecord muon(const std::string& name, int64_t r, int64_t c, Dtype d = Dtype::fp32) {
  ParamRecord p;
  p.name = name;
  p.kind = Kind::muon;
  p.dtype = d;
  p.shape = {r, c};
  p.numel = r * c;
  p.lr_mul = p.wd_mul = 1;
  return p;
}

TEST(Plan, LargestFirstOntoLeastLoaded) {
  const std::vector<std::array<int64_t, 2>> shapes = {{8, 8}, {64, 64}, {8, 8}, {32, 32}, {16, 16}};
  const auto owners = plan_owners(shapes, 2);
  EXPECT_EQ(owners[1], 0);  // 64x64 first, onto rank 0
  EXPECT_EQ(owners[3], 1);  // then 32x32 onto the emptier rank 1
  EXPECT_EQ(owners, plan_owners(shapes, 2));  // deterministic
  // Every matrix owned by a valid rank; with one rank everything is rank 0.
  for (int o : plan_owners(shapes, 3)) EXPECT_TRUE(o >= 0 && o < 3);
  for (int o : plan_owners(shapes, 1)) EXPECT_EQ(o, 0);
}

TEST(Plan, CostIsMinSquaredTimesMax) {
  EXPECT_EQ(newton_schulz_cost(3, 10), 90.0);
  EXPECT_EQ(newton_schulz_cost(10, 3), 90.0);
}

TEST(Plan, OwnerMajorLayoutSegmentsDoNotOverlap) {
  for (int world : {1, 2, 3, 4, 5}) {
    std::vector<ParamRecord> params = {muon("a", 5, 7), muon("b", 7, 5), muon("c", 3, 3, Dtype::bf16),
                                       muon("d", 9, 2), muon("e", 4, 4)};
    ParamRecord adam = muon("bias", 1, 17);
    adam.kind = Kind::adam;
    params.insert(params.begin() + 2, adam);
    const Layout l = plan_layout(params, world);
    EXPECT_EQ(l.num_adam_rows, 1);
    for (int d = 0; d < kNumDtypes; ++d) {
      const int64_t seg = l.muon[d].segment_elements;
      EXPECT_EQ(seg % kAlignElements, 0);
      std::vector<std::pair<int64_t, int64_t>> spans;
      for (const auto& p : params) {
        if (p.kind != Kind::muon || static_cast<int>(p.dtype) != d) continue;
        EXPECT_EQ(p.offset % kAlignElements, 0);
        EXPECT_GE(p.offset, p.owner * seg);                 // inside its owner's segment
        EXPECT_LE(p.offset + p.numel, (p.owner + 1) * seg);
        spans.push_back({p.offset, p.offset + p.numel});
      }
      std::sort(spans.begin(), spans.end());
      for (std::size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
    }
    EXPECT_EQ(params[2].owner, -1);
    EXPECT_EQ(params[2].offset, 0);
  }
}

}  // namespace
