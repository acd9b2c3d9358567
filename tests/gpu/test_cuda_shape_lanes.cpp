// Muon shape batches spread over concurrent lanes (NsTuneConfig::shape_lanes,
// cuda_muon.cu) compute what one order computes, bit for bit: eager, with
// per-shape graphs and with the whole-step graph, with the products the
// tuner picks and with Gram forced (whose Q update forks beside inside a
// lane), across a learning-rate change and a parameter without a gradient;
// the batches really went to lanes (Diagnostics::lane_batches).
#include <string>

#include "backends/cuda/cuda_ns_tune.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "gpu/gpu_backend.hpp"
#include "support/temp_dir.hpp"

namespace {

using gputest::cuda_of;
using gputest::key_of;
using gputest::Model;
using gputest::Spec;

// Six batches on one rank, fewer per rank at 2 and 4 ranks (a rank with one
// batch has no lanes to use).
const std::vector<Spec> kShapes = {
    {"wide", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 768}},  // Gram with Q's update beside (n >= 3k)
    {"tall", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {768, 256}},
    {"b1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 256}},
    {"b2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 256}},
    {"sq_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {256, 256}},
    {"small", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {32, 48}},  // the fused small-matrix kernel
    {"narrow", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {128, 192}},
    {"bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {300}},
};

constexpr int kLanes = 4;

const dmuon::CudaStepState& state_of(Model& m) { return *static_cast<const dmuon::CudaStepState*>(key_of(m)); }

void check_lanes(int symmetric, int graphs, int step_graph) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_lr = 0.05;
  o.muon_weight_decay = 0.05;
  o.max_grad_norm = 50.0;
  o.muon_ns_symmetric = symmetric;
  o.cuda_graphs = graphs;
  o.cuda_step_graph = step_graph;
  Model lanes("cuda", kShapes, o), one("cuda", kShapes, o);
  // Timed choices could differ between two timings: `one` reads the choices
  // `lanes` timed (it steps first) from a cache file of this test's own.
  const std::string dir = dmuon_test::temp_dir("dmuon_lanes");
  ASSERT_FALSE(dir.empty());
  for (Model* m : {&lanes, &one}) {
    cuda_of(*m).ns_tuner().config.cache = true;
    cuda_of(*m).ns_tuner().config.cache_dir = dir;
  }
  cuda_of(lanes).ns_tuner().config.shape_lanes = kLanes;
  cuda_of(one).ns_tuner().config.shape_lanes = 1;
  lanes.init();
  one.init();
  const std::string label = "symmetric " + std::to_string(symmetric) + ", graphs " + std::to_string(graphs) +
                            ", step graph " + std::to_string(step_graph);
  for (int step = 0; step < 6; ++step) {
    if (step == 3)
      for (Model* m : {&lanes, &one}) ASSERT_EQ(dmuon_set_lr(m->opt, DMUON_KIND_MUON, 0.02), DMUON_SUCCESS);
    if (step == 4)
      for (Model* m : {&lanes, &one}) ASSERT_EQ(dmuon_mark_no_grad(m->opt, 2), DMUON_SUCCESS);
    for (Model* m : {&lanes, &one}) {
      m->grads(step);
      ASSERT_EQ(dmuon_step(m->opt), DMUON_SUCCESS) << dmuon_context_last_error(m->ctx);
    }
    for (std::size_t k = 0; k < kShapes.size(); ++k)
      ASSERT_EQ(lanes.raw(int(k)), one.raw(int(k))) << kShapes[k].name << " step " << step << ", " << label;
  }
  // The two really ran differently: lanes were made where a rank runs several
  // batches (at most kLanes - 1 beside the step's stream), never in one order.
  const int batches = lanes.owned_batches();
  const std::size_t expected = batches > 1 ? std::min<std::size_t>(batches, kLanes) - 1 : 0;
  EXPECT_EQ(state_of(lanes).lanes.size(), expected) << label;
  EXPECT_EQ(state_of(one).lanes.size(), 0u) << label;
  // And used: batches went to a lane (in a capture, once; eager, every step after the first).
  const long used = cuda_of(lanes).diagnostics(key_of(lanes)).lane_batches;
  if (expected) EXPECT_GT(used, 0) << label;
  EXPECT_EQ(cuda_of(one).diagnostics(key_of(one)).lane_batches, 0) << label;
  dmuon_test::remove_tree(dir);
  if (step_graph) EXPECT_GT(cuda_of(lanes).diagnostics(key_of(lanes)).step_replays, 0) << label;
}

TEST(CudaShapeLanes, TunedProductsAreBitwiseOneOrder) {
  for (int graphs : {0, 1}) check_lanes(DMUON_NS_SYMMETRIC_AUTO, graphs, 0);
  check_lanes(DMUON_NS_SYMMETRIC_AUTO, 1, 1);
}

TEST(CudaShapeLanes, GramAreBitwiseOneOrder) {
  for (int graphs : {0, 1}) check_lanes(DMUON_NS_SYMMETRIC_GRAM, graphs, 0);
  check_lanes(DMUON_NS_SYMMETRIC_GRAM, 1, 1);
}

}  // namespace
