// Gram Newton-Schulz on the "cuda" backend (core/newton_schulz.hpp's Gram
// iteration over the cuBLASLt engine of cuda_muon.cu), forced with the
// option muon_ns_symmetric = DMUON_NS_SYMMETRIC_GRAM: the update agrees with the plain
// iteration's within the documented bf16 tolerance (wide, tall and batched
// shapes, fp32 and bf16 parameters, quintic and Polar Express); a shape it
// does not fit keeps the plain products bit for bit; per-shape and
// whole-step graph replay equal eager bit for bit; Q's update beside R's
// equals the iteration in one order bit for bit; a single matrix whose
// normalisation the first products apply agrees with the normalised one.
#include <algorithm>
#include <cmath>

#include "backends/cuda/cuda_ns_tune.hpp"
#include "backends/cuda/cuda_state.hpp"
#include "gpu/gpu_backend.hpp"
#include "gpu/ns_variants.hpp"

namespace {

using gputest::cuda_of;
using gputest::key_of;
using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kShapes = {
    {"wide", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 512}},
    {"wide_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {96, 384}},
    {"tall", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {768, 192}},  // X is the buffer read column-major
    {"b1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 256}},     // three of one shape: one batch
    {"b2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 256}},
    {"b3", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 256}},
    {"narrow", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 192}},  // under twice as wide: plain
    {"bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {50}},
};
const std::size_t kNarrow = 6;

// Gram against plain, relative Frobenius difference of one step's update
// (docs/reference/newton-schulz.md): both round to bf16 at every product,
// in a different order of products.
constexpr double kGramTolerance = 0.06;

dmuon_options_t options(int schedule) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_lr = 0.1;  // steps well above bf16 storage resolution of the parameters
  o.muon_weight_decay = 0.05;
  o.muon_ns_schedule = schedule;
  return o;
}

// Products of a model (options.muon_ns_symmetric, before its first step):
// 0 plain, kNsGramBlocks (DMUON_NS_SYMMETRIC_GRAM) Gram; no cache.
void configure(Model& m, int symmetric) {
  dmuon_options_t o = m.opt->impl.options();
  o.muon_ns_symmetric = symmetric;
  m.opt->impl.set_options(o);
  cuda_of(m).ns_tuner().config.cache = false;
}

void check_gram_matches_plain(int schedule) {
  const dmuon_options_t o = options(schedule);
  // The products are each rank's own: on MPI_COMM_SELF every rank runs every shape.
  Model plain("cuda", kShapes, o, MPI_COMM_SELF), gram("cuda", kShapes, o, MPI_COMM_SELF);
  configure(plain, 0);
  configure(gram, dmuon::kNsGramBlocks);
  plain.init();
  gram.init();
  expect_updates_match(plain, gram, kShapes, kNarrow, kGramTolerance, "Gram, schedule " + std::to_string(schedule));
  const std::string choices = cuda_of(gram).kernel_choices();
  EXPECT_NE(choices.find("gram=gram_ns (forced"), std::string::npos) << choices;
  EXPECT_NE(choices.find("does not fit 128x192"), std::string::npos) << choices;
}

TEST(CudaNsGram, QuinticMatchesPlain) { check_gram_matches_plain(DMUON_NS_QUINTIC); }
TEST(CudaNsGram, PolarExpressMatchesPlain) { check_gram_matches_plain(DMUON_NS_POLAR_EXPRESS); }

// Forced Gram: per-shape graphs and the whole-step graph replay exactly what
// eager execution computes, across a learning-rate change.
TEST(CudaNsGram, ReplayIsBitwiseEager) {
  dmuon_options_t eo = options(DMUON_NS_QUINTIC), go = eo, so = eo;
  eo.cuda_graphs = 0;
  so.cuda_step_graph = 1;
  Model eager("cuda", kShapes, eo), graph("cuda", kShapes, go), whole("cuda", kShapes, so);
  for (Model* m : {&eager, &graph, &whole}) {
    configure(*m, dmuon::kNsGramBlocks);
    m->init();
  }
  for (int step = 0; step < 5; ++step) {
    if (step == 3)
      for (Model* m : {&eager, &graph, &whole}) ASSERT_EQ(dmuon_set_lr(m->opt, DMUON_KIND_MUON, 0.03), DMUON_SUCCESS);
    for (Model* m : {&eager, &graph, &whole}) {
      m->grads(step);
      ASSERT_EQ(dmuon_step(m->opt), DMUON_SUCCESS) << dmuon_context_last_error(m->ctx);
    }
    for (std::size_t k = 0; k < kShapes.size(); ++k) {
      ASSERT_EQ(graph.raw(int(k)), eager.raw(int(k))) << kShapes[k].name << " step " << step;
      ASSERT_EQ(whole.raw(int(k)), eager.raw(int(k))) << kShapes[k].name << " step " << step;
    }
  }
  EXPECT_EQ(cuda_of(graph).diagnostics(key_of(graph)).shape_fallbacks, 0);
  EXPECT_GT(cuda_of(whole).diagnostics(key_of(whole)).step_replays, 0);
}

// Q's update beside R's (a second stream, where n >= 3k) computes what the
// iteration in one order computes, bit for bit, eager and whole-step graph.
TEST(CudaNsGram, BesideIsBitwiseOneOrder) {
  for (int step_graph : {0, 1}) {
    dmuon_options_t o = options(DMUON_NS_QUINTIC);
    o.cuda_step_graph = step_graph;
    Model beside("cuda", kShapes, o), serial("cuda", kShapes, o);
    configure(beside, dmuon::kNsGramBlocks);
    configure(serial, dmuon::kNsGramBlocks);
    cuda_of(serial).ns_tuner().config.gram_beside = false;
    beside.init();
    serial.init();
    for (int step = 0; step < 4; ++step) {
      for (Model* m : {&beside, &serial}) {
        m->grads(step);
        ASSERT_EQ(dmuon_step(m->opt), DMUON_SUCCESS) << dmuon_context_last_error(m->ctx);
      }
      for (std::size_t k = 0; k < kShapes.size(); ++k)
        ASSERT_EQ(beside.raw(int(k)), serial.raw(int(k))) << kShapes[k].name << " step " << step << " graph " << step_graph;
    }
    // The two really ran differently: only one has the second stream's workspace.
    EXPECT_NE(static_cast<const dmuon::CudaStepState*>(key_of(beside))->ns_workspace, nullptr);
    EXPECT_EQ(static_cast<const dmuon::CudaStepState*>(key_of(serial))->ns_workspace, nullptr);
  }
}

// A single matrix's Gram iteration applies the Frobenius normalisation in
// its first products (device-side alpha) instead of a pass over X: the same
// update within rounding, the batch (which keeps the pass) bit for bit, and
// the same again in the whole-step graph, whose replays reuse the scales.
TEST(CudaNsGram, DeferredNormMatchesNormalised) {
  for (int step_graph : {0, 1}) {
    dmuon_options_t o = options(DMUON_NS_QUINTIC);
    o.cuda_step_graph = step_graph;
    Model pass("cuda", kShapes, o, MPI_COMM_SELF), deferred("cuda", kShapes, o, MPI_COMM_SELF);
    configure(pass, dmuon::kNsGramBlocks);
    configure(deferred, dmuon::kNsGramBlocks);
    cuda_of(pass).ns_tuner().config.gram_defer_norm = false;
    pass.init();
    deferred.init();
    const std::string label = "deferred norm, graph " + std::to_string(step_graph);
    // Rounding differs only where X is rounded once (s X X^T) instead of twice.
    expect_updates_match(pass, deferred, kShapes, kNarrow, 0.03, label);
    for (int step = 3; step < 5; ++step)  // the whole-step graph replays from here on
      for (Model* m : {&pass, &deferred}) {
        m->grads(step);
        ASSERT_EQ(dmuon_step(m->opt), DMUON_SUCCESS) << dmuon_context_last_error(m->ctx);
      }
    for (const char* one : {"wide", "wide_bf16", "tall"}) {
      const int k = int(std::find_if(kShapes.begin(), kShapes.end(), [&](const Spec& s) { return s.name == one; }) -
                        kShapes.begin());
      EXPECT_NE(deferred.raw(k), pass.raw(k)) << one << ": the deferred products did not run";
    }
    for (int k : {3, 4, 5}) EXPECT_EQ(deferred.raw(k), pass.raw(k)) << kShapes[std::size_t(k)].name << " " << label;
    if (step_graph) EXPECT_GT(cuda_of(deferred).diagnostics(key_of(deferred)).step_replays, 0);
  }
}

}  // namespace
