// Gram Newton-Schulz on the "cuda" backend (core/newton_schulz.hpp's Gram
// iteration over the cuBLASLt engine of cuda_muon.cu), forced with the
// option muon_ns_symmetric = DMUON_NS_SYMMETRIC_GRAM: the update agrees with the plain
// iteration's within the documented bf16 tolerance (wide, tall and batched
// shapes, fp32 and bf16 parameters, quintic and Polar Express); a shape it
// does not fit keeps the plain products bit for bit; per-shape and
// whole-step graph replay equal eager bit for bit; Q's update beside R's
// equals the iteration in one order bit for bit; a single matrix whose
// normalisation the first products apply agrees with the normalised one,
// and one whose last product also applies the update agrees with the update
// pass and leaves a matrix without a gradient, or a skipped step, untouched.
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

// Two models forced to Gram, one with `option` off, compared over three steps
// within `tolerance` (expect_updates_match), then two more steps (the
// whole-step graph replays by then): the single matrices ("wide", "wide_bf16",
// "tall") must differ in bits, the batch (b1-b3, one scale per matrix, so
// never deferred) must not. `then` checks more on the model with the option.
template <class Then>
void check_gram_option(bool dmuon::NsTuneConfig::*option, double tolerance, const std::string& what, Then then) {
  for (int step_graph : {0, 1}) {
    dmuon_options_t o = options(DMUON_NS_QUINTIC);
    o.cuda_step_graph = step_graph;
    o.skip_nonfinite = 1;
    Model off("cuda", kShapes, o, MPI_COMM_SELF), on("cuda", kShapes, o, MPI_COMM_SELF);
    configure(off, dmuon::kNsGramBlocks);
    configure(on, dmuon::kNsGramBlocks);
    cuda_of(off).ns_tuner().config.*option = false;
    off.init();
    on.init();
    const std::string label = what + ", graph " + std::to_string(step_graph);
    expect_updates_match(off, on, kShapes, kNarrow, tolerance, label);
    for (int step = 3; step < 5; ++step)
      for (Model* m : {&off, &on}) {
        m->grads(step);
        ASSERT_EQ(dmuon_step(m->opt), DMUON_SUCCESS) << dmuon_context_last_error(m->ctx);
      }
    for (int k : {0, 1, 2}) EXPECT_NE(on.raw(k), off.raw(k)) << kShapes[std::size_t(k)].name << ": no " << label;
    for (int k : {3, 4, 5}) EXPECT_EQ(on.raw(k), off.raw(k)) << kShapes[std::size_t(k)].name << " " << label;
    if (step_graph) EXPECT_GT(cuda_of(on).diagnostics(key_of(on)).step_replays, 0);
    then(on, label);
  }
}

// A single matrix's Gram iteration applies the Frobenius normalisation in
// its first products (device-side alpha) instead of a pass over X: the same
// update within rounding (X is rounded once, in s X X^T, not twice).
TEST(CudaNsGram, DeferredNormMatchesNormalised) {
  check_gram_option(&dmuon::NsTuneConfig::gram_defer_norm, 0.03, "deferred norm", [](Model&, const std::string&) {});
}

// The last product applies the update to the parameter (alpha -lr, beta the
// decay, on the device) instead of the update pass: the same update but for
// the pass's rounding of the result to bf16, for fp32 and bf16 parameters,
// wide and tall; a matrix without a gradient and a skipped step keep every bit.
TEST(CudaNsGram, FusedUpdateMatchesPass) {
  const auto untouched = [](Model& fused, const std::string& label) {
    std::vector<std::vector<char>> before;
    for (std::size_t k = 0; k < kShapes.size(); ++k) before.push_back(fused.raw(int(k)));
    // "wide" without a gradient: alpha 0 and beta 1 leave it as it was.
    fused.grads(5);
    ASSERT_EQ(dmuon_mark_no_grad(fused.opt, 0), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_step(fused.opt), DMUON_SUCCESS) << dmuon_context_last_error(fused.ctx);
    EXPECT_EQ(fused.raw(0), before[0]) << "wide without a gradient " << label;
    EXPECT_NE(fused.raw(1), before[1]) << "wide_bf16 did not step " << label;
    // A non-finite gradient skips the step: nothing moves.
    for (std::size_t k = 0; k < kShapes.size(); ++k) before[k] = fused.raw(int(k));
    fused.grads(6);
    std::vector<double> bad(static_cast<std::size_t>(kShapes[2].numel()), 0.5);
    bad[7] = NAN;
    fused.put(2, true, bad);
    ASSERT_EQ(dmuon_step(fused.opt), DMUON_SUCCESS) << dmuon_context_last_error(fused.ctx);
    for (std::size_t k = 0; k < kShapes.size(); ++k)
      EXPECT_EQ(fused.raw(int(k)), before[k]) << kShapes[k].name << " after a skipped step " << label;
  };
  check_gram_option(&dmuon::NsTuneConfig::gram_fuse_update, 0.01, "fused update", untouched);
}

}  // namespace
