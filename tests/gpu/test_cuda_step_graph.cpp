// The whole-step CUDA graph (options.cuda_step_graph = 1): NCCL, clipping,
// Muon and Adam captured once after a warm-up step and replayed; every byte
// equal to eager steps, across setter changes (which must not need a
// re-capture) and a no-grad step (which must). The captured step holds no
// device-to-host copy. A step whose products make cuBLASLt clear workspaces
// (memset nodes) is instantiated for device launch and replays the same.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backends/cuda/cuda_graph_exec.hpp"
#include "backends/cuda/cuda_programmatic_edges.hpp"
#include "gpu/gpu_backend.hpp"

namespace {

using gputest::cuda_of;
using gputest::key_of;
using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kModel = {
    {"attn", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {64, 192}},
    {"proj", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {64, 64}},
    {"mlp_in", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 64}},
    {"mlp_in2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 64}},
    {"ln", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {64}},
    {"emb", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {100, 64}},
    {"head_b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {1001}},
};

// A replayed graph is instantiated for device launch where it holds enough
// memsets (alone: no NCCL node that could refuse the flag), plainly elsewhere.
void expect_instantiation_rule(const dmuon::CudaBackend::Diagnostics& d) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks == 1) EXPECT_EQ(d.step_graph_device_launch, d.step_graph_memsets >= dmuon::kDeviceLaunchMemsets ? 1 : 0);
  EXPECT_GE(d.step_graph_device_launch, 0);
  const int programmatic = dmuon::programmatic_edges(static_cast<cudaGraph_t>(d.step_graph));
  // Where DMUON_CUDA_PDL asks for them, the graph has some (every test step
  // has momentum kernels before products, products before updates).
  if (dmuon::programmatic_edges_wanted() != dmuon::ProgrammaticEdges::none) EXPECT_GT(programmatic, 0);
  else EXPECT_EQ(programmatic, 0);
  std::printf("ranks %d: whole-step graph of %d nodes, %d memsets, %d programmatic edges, instantiated %s\n", ranks,
              d.step_graph_nodes, d.step_graph_memsets, programmatic,
              d.step_graph_device_launch == 1 ? "for device launch" : "plainly");
}

TEST(CudaStepGraph, ReplayIsBitwiseEager) {
  dmuon_options_t eager_o = DMUON_OPTIONS_INIT;
  eager_o.max_grad_norm = 20.0;  // clips some steps, not others (gradient scale varies below)
  eager_o.skip_nonfinite = 1;
  dmuon_options_t graph_o = eager_o;
  graph_o.cuda_step_graph = 1;
  Model eager("cuda", kModel, eager_o), graph("cuda", kModel, graph_o);
  eager.init();
  graph.init();
  for (int step = 0; step < 10; ++step) {
    const double scale = step % 2 ? 0.05 : 1.0;
    if (step == 3)
      for (Model* m : {&eager, &graph}) {
        ASSERT_EQ(dmuon_set_lr(m->opt, DMUON_KIND_ADAM, 3e-3), DMUON_SUCCESS);
        ASSERT_EQ(dmuon_set_lr(m->opt, DMUON_KIND_MUON, 0.01), DMUON_SUCCESS);
        ASSERT_EQ(dmuon_set_max_grad_norm(m->opt, 5.0), DMUON_SUCCESS);
        ASSERT_EQ(dmuon_set_betas(m->opt, 0.85, 0.99), DMUON_SUCCESS);
      }
    if (step == 5)
      for (Model* m : {&eager, &graph}) ASSERT_EQ(dmuon_mark_no_grad(m->opt, 5), DMUON_SUCCESS);
    auto ge = eager.grads(step, scale);
    graph.grads(step, scale);
    if (step == 8) {  // a non-finite step, replayed: skipped on the device by both
      ge[4][2] = NAN;
      eager.put(4, true, ge[4]);
      graph.put(4, true, ge[4]);
    }
    ASSERT_EQ(dmuon_step(eager.opt), DMUON_SUCCESS) << dmuon_context_last_error(eager.ctx);
    ASSERT_EQ(dmuon_step(graph.opt), DMUON_SUCCESS) << dmuon_context_last_error(graph.ctx);
    for (std::size_t k = 0; k < kModel.size(); ++k)
      ASSERT_EQ(graph.raw(int(k)), eager.raw(int(k))) << kModel[k].name << " step " << step;
    dmuon_clip_stats_t se, sg;
    ASSERT_EQ(dmuon_get_clip_stats(eager.opt, &se), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_get_clip_stats(graph.opt, &sg), DMUON_SUCCESS);
    EXPECT_EQ(std::memcmp(&sg.total_norm, &se.total_norm, sizeof(double)), 0) << "step " << step;  // NaN too
    EXPECT_EQ(sg.clip_coef, se.clip_coef);
    EXPECT_EQ(sg.step_skipped, step == 8 ? 1 : 0);
    EXPECT_EQ(se.step_skipped, step == 8 ? 1 : 0);
  }
  int64_t ne = 0, ng = 0;
  dmuon_get_step_count(eager.opt, &ne);
  dmuon_get_step_count(graph.opt, &ng);
  EXPECT_EQ(ng, ne);
  EXPECT_EQ(ng, 9);
  const auto d = cuda_of(graph).diagnostics(key_of(graph));
  // Step 0 warms up, 1 captures, 2-4 replay; the no-grad step 5 and step 6
  // (back to all gradients) change the structure and run eagerly; 7 captures
  // again, 8-9 replay.
  EXPECT_EQ(d.step_replays, 5);
  EXPECT_GT(d.step_graph_nodes, 10);
  EXPECT_EQ(d.step_graph_d2h_copies, 0);
  expect_instantiation_rule(d);
}

// Products large enough that cuBLASLt clears a workspace before them (memset
// nodes in the graph): where the graph holds kDeviceLaunchMemsets of them and
// no NCCL (one rank), it is instantiated for device launch, and its replays
// still give the eager step's bytes.
TEST(CudaStepGraph, LargeProductsReplayIsBitwiseEager) {
  const std::vector<Spec> model = {{"big", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {4096, 4096}},
                                   {"bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {4096}}};
  // The shape's products: timed by the first model's first step, read from
  // the cache by the second's.
  dmuon_options_t eager_o = DMUON_OPTIONS_INIT;
  dmuon_options_t graph_o = eager_o;
  graph_o.cuda_step_graph = 1;
  Model eager("cuda", model, eager_o), graph("cuda", model, graph_o);
  eager.init();
  graph.init();
  for (int step = 0; step < 6; ++step) {
    eager.grads(step);
    graph.grads(step);
    ASSERT_EQ(dmuon_step(eager.opt), DMUON_SUCCESS) << dmuon_context_last_error(eager.ctx);
    ASSERT_EQ(dmuon_step(graph.opt), DMUON_SUCCESS) << dmuon_context_last_error(graph.ctx);
    for (std::size_t k = 0; k < model.size(); ++k)
      ASSERT_EQ(graph.raw(int(k)), eager.raw(int(k))) << model[k].name << " step " << step;
  }
  const auto d = cuda_of(graph).diagnostics(key_of(graph));
  EXPECT_EQ(d.step_replays, 4);  // step 0 warms up, 1 captures
  expect_instantiation_rule(d);
}

}  // namespace
