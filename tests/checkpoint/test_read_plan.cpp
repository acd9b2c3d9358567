// plan_reads (hdf5_io/read_plan.hpp) alone, without files or MPI: every rank
// of a world runs its read plan against an in-memory "file", the completions
// are carried out by hand (from the other ranks, and again from the file),
// and every rank's buffers must then hold each parameter where the plan puts
// it, whatever world size the file was saved on.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "read_plan.hpp"

using namespace dmuon;
using namespace dmuon::ckpt;

namespace {

ParamRecord param(const std::string& name, Kind kind, Dtype d, std::vector<int64_t> shape) {
  ParamRecord p;
  p.name = name;
  p.kind = kind;
  p.dtype = d;
  p.shape = shape;
  p.numel = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
  p.lr_mul = p.wd_mul = 1;
  return p;
}

// A mixed model: Muon matrices of both dtypes and odd sizes, Adam vectors
// whose lengths are not multiples of the alignment.
std::vector<ParamRecord> model() {
  return {param("w0", Kind::muon, Dtype::fp32, {24, 40}), param("b0", Kind::adam, Dtype::fp32, {17}),
          param("w1", Kind::muon, Dtype::fp32, {33, 7}),  param("w2", Kind::muon, Dtype::bf16, {16, 16}),
          param("g", Kind::adam, Dtype::bf16, {5}),       param("w3", Kind::muon, Dtype::fp32, {9, 50}),
          param("b1", Kind::adam, Dtype::fp32, {31}),     param("w4", Kind::muon, Dtype::fp32, {12, 12}),
          param("s", Kind::adam, Dtype::fp32, {1})};
}

// The file's layout for the registered parameters when the file stored them
// in `saved_order` (registered ids): each (kind, dtype) dataset holds them
// end to end in that order.
Canonical file_of(const std::vector<ParamRecord>& params, const std::vector<int>& saved_order) {
  Canonical c;
  c.offset.assign(params.size(), 0);
  for (const int id : saved_order) {
    const ParamRecord& p = params[static_cast<std::size_t>(id)];
    auto& total = (p.kind == Kind::muon ? c.muon_total : c.adam_total)[static_cast<std::size_t>(p.dtype)];
    c.offset[static_cast<std::size_t>(id)] = total;
    total += p.numel;
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].kind == Kind::adam) c.adam_params.push_back(static_cast<int>(i));
  return c;
}

// Element k of a dataset: distinct across datasets and positions.
int64_t stored(const DatasetRead& r, int64_t k) {
  return k * 64 + static_cast<int64_t>(r.role) * 8 + static_cast<int64_t>(r.kind) * 2 + static_cast<int64_t>(r.dtype) + 1;
}

void copy_pieces(const DatasetRead& r, const std::vector<Piece>& pieces, std::vector<int64_t>& into) {
  for (const Piece& p : pieces) {
    ASSERT_GE(p.file, 0);
    ASSERT_LE(p.file + p.count, r.total) << "a piece reads past the dataset";
    ASSERT_GE(p.mem, 0);
    ASSERT_LE(p.mem + p.count, static_cast<int64_t>(into.size())) << "a piece writes past the staging";
    for (int64_t k = 0; k < p.count; ++k) into[static_cast<std::size_t>(p.mem + k)] = stored(r, p.file + k);
  }
}

// Runs every rank's plan; `from_file` completes replicated datasets by
// reading the other ranks' pieces from the file, else from the other
// ranks' staging (the gathers). Returns, per rank, each dataset's image.
std::vector<std::vector<std::vector<int64_t>>> run(const Plan& plan, const Canonical& file, bool from_file) {
  const int world = plan.world;
  std::vector<std::vector<DatasetRead>> reads;
  std::vector<std::vector<std::vector<int64_t>>> staging(static_cast<std::size_t>(world));
  for (int q = 0; q < world; ++q) {
    reads.push_back(plan_reads(plan, file, q));
    for (const DatasetRead& r : reads.back()) {
      staging[static_cast<std::size_t>(q)].emplace_back(static_cast<std::size_t>(r.staging), -1);
      copy_pieces(r, r.own, staging[static_cast<std::size_t>(q)].back());
    }
  }
  auto images = staging;
  for (int q = 0; q < world; ++q)
    for (std::size_t i = 0; i < reads[static_cast<std::size_t>(q)].size(); ++i) {
      const DatasetRead& r = reads[static_cast<std::size_t>(q)][i];
      std::vector<int64_t>& image = images[static_cast<std::size_t>(q)][i];
      if (r.completion == Completion::none) continue;
      if (from_file) {
        copy_pieces(r, r.others, image);
      } else if (r.completion == Completion::segments) {
        const int64_t seg = r.staging / world;
        for (int o = 0; o < world; ++o)
          std::copy_n(staging[static_cast<std::size_t>(o)][i].begin() + o * seg, seg, image.begin() + o * seg);
      } else {
        for (int o = 0; o < world; ++o)
          std::copy_n(staging[static_cast<std::size_t>(o)][i].begin() + r.displs[static_cast<std::size_t>(o)],
                      r.counts[static_cast<std::size_t>(o)], image.begin() + r.displs[static_cast<std::size_t>(o)]);
      }
      if (r.completion == Completion::canonical) {
        std::vector<int64_t> placed(static_cast<std::size_t>(r.image), -1);
        for (const Piece& p : r.placement)
          std::copy_n(image.begin() + p.file, p.count, placed.begin() + p.mem);
        image = placed;
      }
    }
  // Same datasets, same order, on every rank.
  for (int q = 1; q < world; ++q) {
    EXPECT_EQ(reads[static_cast<std::size_t>(q)].size(), reads[0].size());
    for (std::size_t i = 0; i < reads[0].size(); ++i) {
      EXPECT_EQ(reads[static_cast<std::size_t>(q)][i].role, reads[0][i].role);
      EXPECT_EQ(reads[static_cast<std::size_t>(q)][i].dtype, reads[0][i].dtype);
    }
  }
  return images;
}

// Every rank's own pieces of a dataset together cover it exactly once: each
// element is verified by one rank (the Muon momentum: by its owner).
void expect_covered_once(const Plan& plan, const Canonical& file) {
  std::map<std::tuple<int, int, int>, std::vector<int>> seen;
  for (int q = 0; q < plan.world; ++q)
    for (const DatasetRead& r : plan_reads(plan, file, q)) {
      auto& count = seen[{static_cast<int>(r.role), static_cast<int>(r.kind), static_cast<int>(r.dtype)}];
      count.resize(static_cast<std::size_t>(r.total), 0);
      for (const Piece& p : r.own)
        for (int64_t k = 0; k < p.count; ++k) ++count[static_cast<std::size_t>(p.file + k)];
    }
  for (const auto& [key, count] : seen)
    for (std::size_t k = 0; k < count.size(); ++k)
      ASSERT_EQ(count[k], 1) << "dataset (role " << std::get<0>(key) << ", kind " << std::get<1>(key) << ", dtype "
                             << std::get<2>(key) << ") element " << k << " is read by " << count[k] << " ranks";
}

// Each rank's images hold every parameter where the plan puts it.
void expect_placed(const Plan& plan, const Canonical& file, bool from_file) {
  const auto images = run(plan, file, from_file);
  for (int q = 0; q < plan.world; ++q) {
    const std::vector<DatasetRead> reads = plan_reads(plan, file, q);
    for (std::size_t i = 0; i < reads.size(); ++i) {
      const DatasetRead& r = reads[i];
      const std::vector<int64_t>& image = images[static_cast<std::size_t>(q)][i];
      ASSERT_EQ(static_cast<int64_t>(image.size()), r.image);
      const bool segment = r.role == StateRole::momentum;
      const int64_t expected_size = r.kind == Kind::adam ? plan.layout.adam_elements[static_cast<std::size_t>(r.dtype)]
                                    : segment ? plan.layout.muon[static_cast<std::size_t>(r.dtype)].segment_elements
                                              : plan.layout.muon[static_cast<std::size_t>(r.dtype)].total_elements();
      EXPECT_EQ(r.image, expected_size) << "the image is not the size of the optimizer's buffer";
      for (std::size_t id = 0; id < plan.params.size(); ++id) {
        const ParamRecord& p = plan.params[id];
        if (p.kind != r.kind || p.dtype != r.dtype || (segment && p.owner != q)) continue;
        const int64_t at = segment ? plan.layout.local_offset(p) : p.offset;
        for (int64_t k = 0; k < p.numel; ++k)
          ASSERT_EQ(image[static_cast<std::size_t>(at + k)], stored(r, file.offset[id] + k))
              << p.name << " element " << k << " of role " << static_cast<int>(r.role) << " on rank " << q << " of "
              << plan.world << (from_file ? " (completed from the file)" : " (completed by gathers)");
      }
    }
  }
}

std::vector<int> registration_order(std::size_t n) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

void check_all(const Plan& plan, const Canonical& file) {
  expect_covered_once(plan, file);
  expect_placed(plan, file, false);
  expect_placed(plan, file, true);
}

TEST(ReadPlan, SameWorldReplaysStoredOwners) {
  const auto params = model();
  // Stored owners unlike the ones the planner would choose: they must be kept.
  const std::vector<int> stored_owners = {2, 0, 1, 2, 0};
  const Plan plan = make_plan(params, 3, stored_owners);
  EXPECT_EQ(plan.owners(), stored_owners);
  check_all(plan, file_of(params, registration_order(params.size())));
}

// The file is canonical: a save on N ranks looks the same whatever N was, so
// "N to M" is the file against M's plan. Each world size re-splits the Muon
// segments and the Adam shares.
TEST(ReadPlan, OtherWorldSizes) {
  const auto params = model();
  const Canonical file = file_of(params, registration_order(params.size()));
  for (const int world : {1, 2, 3, 4, 5, 7}) {
    SCOPED_TRACE("restored on " + std::to_string(world) + " ranks");
    check_all(make_plan(params, world), file);
  }
}

TEST(ReadPlan, MuonSegmentsResplit) {
  const auto params = model();
  const Canonical file = file_of(params, registration_order(params.size()));
  const Plan one = make_plan(params, 1), three = make_plan(params, 3);
  // One rank owns every matrix; on three, rank 0 reads only its own, into
  // its segment of a buffer of three segments.
  EXPECT_LT(three.layout.muon[0].segment_elements, one.layout.muon[0].segment_elements);
  const auto all = plan_reads(one, file, 0), some = plan_reads(three, file, 0);
  ASSERT_FALSE(all.empty());
  ASSERT_FALSE(some.empty());
  EXPECT_EQ(all[0].completion, Completion::segments);
  EXPECT_TRUE(all[0].others.empty()) << "one rank: nothing comes from others";
  EXPECT_EQ(some[0].staging, 3 * three.layout.muon[0].segment_elements);
  int64_t read_alone = 0, read_of_three = 0;
  for (const Piece& p : all[0].own) read_alone += p.count;
  for (const Piece& p : some[0].own) read_of_three += p.count;
  EXPECT_EQ(read_alone, all[0].total);
  EXPECT_LT(read_of_three, read_alone);
  EXPECT_FALSE(some[0].others.empty());
}

TEST(ReadPlan, AdamInSavedOrderGathersRanges) {
  const auto params = model();
  const Plan plan = make_plan(params, 4);
  for (const DatasetRead& r : plan_reads(plan, file_of(params, registration_order(params.size())), 1))
    if (r.kind == Kind::adam) {
      EXPECT_EQ(r.completion, Completion::ranges);
      EXPECT_EQ(r.staging, r.image) << "read straight into the padded image";
    }
}

// The model registered its Adam parameters in another order than the file
// holds them: the shares go through a canonical buffer and are placed.
TEST(ReadPlan, AdamInOtherOrderPlacesFromCanonical) {
  const auto params = model();
  std::vector<int> saved = registration_order(params.size());
  std::reverse(saved.begin(), saved.end());
  const Canonical file = file_of(params, saved);
  for (const int world : {1, 2, 5}) {
    SCOPED_TRACE("restored on " + std::to_string(world) + " ranks");
    const Plan plan = make_plan(params, world);
    bool canonical = false;
    for (const DatasetRead& r : plan_reads(plan, file, 0))
      if (r.kind == Kind::adam && r.dtype == Dtype::fp32) canonical = r.completion == Completion::canonical;
    EXPECT_TRUE(canonical || world == 1) << "the shares are not in order, yet no canonical staging";
    check_all(plan, file);
  }
}

bool same_pieces(const std::vector<Piece>& a, const std::vector<Piece>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const Piece& x, const Piece& y) { return x.file == y.file && x.mem == y.mem && x.count == y.count; });
}

// Master weights (bf16 parameters only) are read like the momentum (Muon:
// this rank's segment) and like the moments (Adam: a share, completed from
// the others), in fp32; without `masters` no master dataset is read.
TEST(ReadPlan, MastersFollowMomentumAndMoments) {
  const auto params = model();
  const Canonical file = file_of(params, registration_order(params.size()));
  for (const int world : {1, 3}) {
    const Plan plan = make_plan(params, world);
    for (int q = 0; q < world; ++q) {
      SCOPED_TRACE("rank " + std::to_string(q) + " of " + std::to_string(world));
      for (const DatasetRead& r : plan_reads(plan, file, q)) EXPECT_NE(r.role, StateRole::master);
      const auto reads = plan_reads(plan, file, q, true);
      const auto find = [&](StateRole role, Kind kind) {
        const auto it = std::find_if(reads.begin(), reads.end(), [&](const DatasetRead& r) {
          return r.role == role && r.kind == kind && r.dtype == Dtype::bf16;
        });
        EXPECT_NE(it, reads.end());
        return it;
      };
      for (const DatasetRead& r : reads)
        if (r.role == StateRole::master) EXPECT_EQ(r.dtype, Dtype::bf16) << "no masters of fp32 parameters";
      const auto mm = find(StateRole::master, Kind::muon), mom = find(StateRole::momentum, Kind::muon);
      const auto am = find(StateRole::master, Kind::adam), m1 = find(StateRole::exp_avg, Kind::adam);
      if (mm == reads.end() || mom == reads.end() || am == reads.end() || m1 == reads.end()) continue;
      EXPECT_EQ(mm->element_size, 4u);
      EXPECT_TRUE(same_pieces(mm->own, mom->own));
      EXPECT_EQ(mm->staging, mom->staging);
      EXPECT_EQ(mm->completion, Completion::none);
      EXPECT_EQ(am->element_size, 4u);
      EXPECT_TRUE(same_pieces(am->own, m1->own));
      EXPECT_TRUE(same_pieces(am->others, m1->others));
      EXPECT_EQ(am->completion, m1->completion);
    }
    check_all(plan, file);
  }
}

// A model without Adam parameters (or without Muon ones) reads no dataset of
// that kind; more ranks than Adam elements leaves some shares empty; the
// momentum, a rank's own, is read last.
TEST(ReadPlan, EmptyKindsAndShares) {
  const std::vector<ParamRecord> muon_only = {param("a", Kind::muon, Dtype::fp32, {4, 4})};
  const Plan plan = make_plan(muon_only, 3);
  const Canonical file = file_of(muon_only, {0});
  for (int q = 0; q < 3; ++q) {
    const auto reads = plan_reads(plan, file, q);
    ASSERT_EQ(reads.size(), 2u) << "Muon fp32 param and momentum only";
    EXPECT_EQ(reads.back().role, StateRole::momentum);
    EXPECT_EQ(reads.back().completion, Completion::none);
    if (q != plan.params[0].owner) EXPECT_TRUE(reads.back().own.empty()) << "a rank reads momentum it does not own";
  }
  check_all(plan, file);

  const std::vector<ParamRecord> tiny_adam = {param("s", Kind::adam, Dtype::fp32, {2})};
  const Plan five = make_plan(tiny_adam, 5);
  const Canonical tiny = file_of(tiny_adam, {0});
  int readers = 0;
  for (int q = 0; q < 5; ++q) {
    const auto reads = plan_reads(five, tiny, q);
    ASSERT_EQ(reads.size(), 3u) << "Adam fp32 param, exp_avg, exp_avg_sq";
    readers += reads[0].own.empty() ? 0 : 1;
  }
  EXPECT_EQ(readers, 2) << "two elements, five ranks: two ranks read one each";
  check_all(five, tiny);
}

}  // namespace
