// Symmetric products of Newton-Schulz on the "cuda" backend
// (cuda_ns_symmetric.cu, cuda_ns_tune.cu): forced to 2, 4 and 8 row blocks
// the update equals the plain products' within bf16 tolerance (square, wide,
// tall and batched shapes; a shape the blocks do not fit keeps the plain
// products, bit for bit); per-shape and whole-step graph replay equal eager
// bit for bit; the timed choice is written to the cache file, read back by a
// second backend without timing again, and a damaged or disabled cache
// changes nothing but the timing; once a shape is chosen, steps only enqueue.
#include <sys/stat.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "backends/cuda/cuda_ns_tune.hpp"
#include "gpu/gpu_backend.hpp"
#include "gpu/ns_variants.hpp"
#include "support/temp_dir.hpp"
#include "gpu/hold_stream.cuh"

namespace {

using gputest::cuda_of;
using gputest::key_of;
using gputest::Model;
using gputest::Spec;

const std::vector<Spec> kShapes = {
    {"square", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 256}},
    {"wide_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {128, 384}},
    {"tall", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {384, 128}},  // X is the buffer read column-major
    {"b1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 192}},    // three of one shape: one batch
    {"b2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 192}},
    {"b3", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 192}},
    {"odd", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {100, 300}},   // 100 rows: no equal blocks of 8k rows
    {"bias", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {50}},
};
const std::size_t kOdd = 6;

dmuon_options_t options() {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_lr = 0.1;  // steps well above bf16 storage resolution of the parameters
  o.muon_weight_decay = 0.05;
  return o;
}

// Products of a model (options.muon_ns_symmetric, before its first step): -1
// timed, 0 plain, p forced; no cache unless a directory is given.
void configure(Model& m, int symmetric, const std::string& cache_dir = "") {
  dmuon_options_t o = m.opt->impl.options();
  o.muon_ns_symmetric = symmetric;
  m.opt->impl.set_options(o);
  dmuon::NsTuneConfig& c = cuda_of(m).ns_tuner().config;
  c.cache = !cache_dir.empty();
  c.cache_dir = cache_dir;
}

std::string temp_dir() { return dmuon_test::temp_dir("dmuon_ns_sym"); }
using dmuon_test::remove_tree;
bool exists(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0;
}
std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The update of one step: the forced-symmetric model against the plain one,
// each from its own previous parameters (they drift apart by rounding).
void check_symmetric_matches_plain(int p) {
  const dmuon_options_t o = options();
  // Products are each rank's own: on MPI_COMM_SELF every rank runs every shape.
  Model plain("cuda", kShapes, o, MPI_COMM_SELF), sym("cuda", kShapes, o, MPI_COMM_SELF);
  configure(plain, 0);
  configure(sym, p);
  plain.init();
  sym.init();
  // bf16 Newton-Schulz: both variants round A and B to bf16; they differ in
  // the fp32 summation order of the blocks, far below the 4% the
  // float64-reference tests allow.
  expect_updates_match(plain, sym, kShapes, kOdd, 0.02, "p=" + std::to_string(p));
  const std::string choices = cuda_of(sym).kernel_choices();
  EXPECT_NE(choices.find("gram=sym_blocks" + std::to_string(p) + " (forced"), std::string::npos) << choices;
  EXPECT_NE(choices.find("does not fit 100 rows"), std::string::npos) << choices;
  EXPECT_EQ(cuda_of(sym).diagnostics(key_of(sym)).ns_shapes_timed, 0);
}

TEST(CudaNsSymmetric, TwoBlocksMatchPlain) { check_symmetric_matches_plain(2); }
TEST(CudaNsSymmetric, FourBlocksMatchPlain) { check_symmetric_matches_plain(4); }
TEST(CudaNsSymmetric, EightBlocksMatchPlain) { check_symmetric_matches_plain(8); }

// Forced symmetric products: per-shape graphs and the whole-step graph replay
// exactly what eager execution computes, across a learning-rate change.
TEST(CudaNsSymmetric, ReplayIsBitwiseEager) {
  dmuon_options_t eo = options(), go = options(), so = options();
  eo.cuda_graphs = 0;
  so.cuda_step_graph = 1;
  Model eager("cuda", kShapes, eo), graph("cuda", kShapes, go), whole("cuda", kShapes, so);
  for (Model* m : {&eager, &graph, &whole}) {
    configure(*m, 4);
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
  const auto d = cuda_of(graph).diagnostics(key_of(graph));
  EXPECT_EQ(d.shape_graphs, graph.owned_batches());  // one per (dtype, shape) batch this rank owns
  EXPECT_EQ(d.shape_fallbacks, 0);
  EXPECT_GT(cuda_of(whole).diagnostics(key_of(whole)).step_replays, 0);
  bool owns_fitting = false;  // a shape that four row blocks fit, owned by this rank
  for (std::size_t k = 0; k < kShapes.size(); ++k) {
    int owner = -1;
    ASSERT_EQ(dmuon_param_owner(graph.opt, int(k), &owner), DMUON_SUCCESS);
    owns_fitting |= k != kOdd && kShapes[k].kind == DMUON_KIND_MUON && owner == gputest::rank_in(MPI_COMM_WORLD);
  }
  if (owns_fitting)
    EXPECT_NE(cuda_of(graph).kernel_choices().find("gram=sym_blocks4"), std::string::npos) << cuda_of(graph).kernel_choices();
}

// Shapes of at least kNsTuneMinRows rows are timed; the rest is not (the
// smallest of them run the fused kernel). The
// choice is each rank's own (timed on its GPU, cached in its directory, no
// communication), so the tests of it run on MPI_COMM_SELF: at any number of
// ranks each rank owns every shape and checks the whole sequence.
const std::vector<Spec> kTimed = {
    {"wide", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {256, 512}},
    {"tall", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {512, 256}},
    {"pair_a", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {320, 320}},
    {"pair_b", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {320, 320}},
    {"small", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {64, 96}},    // fused
    {"long", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 1100}},  // under 256 rows, too large to fuse
};
const std::vector<std::array<int64_t, 3>> kTimedKeys = {{256, 512, 1}, {512, 256, 1}, {320, 320, 2}};

std::vector<int> blocks_of(Model& m) {
  std::vector<int> out;
  for (const auto& k : kTimedKeys) {
    const dmuon::NsTuner::Choice* c = cuda_of(m).ns_tuner().choice(k[0], k[1], int(k[2]));
    EXPECT_NE(c, nullptr) << k[0] << "x" << k[1] << " x" << k[2];
    out.push_back(c ? c->blocks : -1);
  }
  return out;
}

TEST(CudaNsSymmetric, ChoiceIsCachedOnDiskAndReadBack) {
  const std::string dir = temp_dir();
  const dmuon_options_t o = options();
  std::string path;
  std::vector<int> first;
  std::vector<char> first_raw;
  {  // First backend: times the three large shapes, writes the file.
    Model a("cuda", kTimed, o, MPI_COMM_SELF);
    configure(a, -1, dir);
    path = cuda_of(a).ns_tuner().cache_path();
    ASSERT_FALSE(path.empty());
    EXPECT_EQ(path.rfind(dir + "/ns-tuning-v4-", 0), 0u) << path;
    a.init();
    a.grads(0);
    ASSERT_EQ(dmuon_step(a.opt), DMUON_SUCCESS) << dmuon_context_last_error(a.ctx);
    auto d = cuda_of(a).diagnostics(key_of(a));
    EXPECT_EQ(d.ns_shapes_timed, 3);
    EXPECT_EQ(d.ns_cache_hits, 0);
    ASSERT_TRUE(exists(path)) << path;
    dmuon::NsCacheEntries e;
    ASSERT_TRUE(dmuon::ns_cache_read(path, e)) << slurp(path);
    EXPECT_EQ(e.size(), 3u) << slurp(path);
    first = blocks_of(a);
    for (const auto& k : kTimedKeys) {
      auto it = e.find(dmuon::NsCacheKey{k[0], k[1], int(k[2])});
      ASSERT_NE(it, e.end()) << slurp(path);
      EXPECT_GT(it->second.plain_ms, 0.0);
    }
    const std::string choices = cuda_of(a).kernel_choices();
    EXPECT_NE(choices.find("(timed choice)"), std::string::npos) << choices;
    EXPECT_NE(choices.find("under 256 rows"), std::string::npos) << choices;
    EXPECT_NE(choices.find("ns 64x96 fp32 x1: gram=fused_small (one kernel, not timed)"), std::string::npos) << choices;
    for (const auto& k : kTimedKeys) {
      const dmuon::NsTuner::Choice* c = cuda_of(a).ns_tuner().choice(k[0], k[1], int(k[2]));
      ASSERT_NE(c, nullptr);
      EXPECT_EQ(c->detail.rfind("timed: plain", 0), 0u) << c->detail;
      EXPECT_GT(c->plain_ms, 0.0);
    }
    // A second step times nothing more.
    a.grads(1);
    ASSERT_EQ(dmuon_step(a.opt), DMUON_SUCCESS);
    EXPECT_EQ(cuda_of(a).diagnostics(key_of(a)).ns_shapes_timed, 3);
    first_raw = a.raw(0);
  }
  {  // Second backend: every choice from the file, the same ones, the same bits.
    Model b("cuda", kTimed, o, MPI_COMM_SELF);
    configure(b, -1, dir);
    b.init();
    for (int step = 0; step < 2; ++step) {
      b.grads(step);
      ASSERT_EQ(dmuon_step(b.opt), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
    }
    const auto d = cuda_of(b).diagnostics(key_of(b));
    EXPECT_EQ(d.ns_shapes_timed, 0);
    EXPECT_EQ(d.ns_cache_hits, 3);
    EXPECT_EQ(blocks_of(b), first);
    EXPECT_EQ(b.raw(0), first_raw);
    // The same kernel_choices text as the backend that timed: checkpoints do not differ.
    EXPECT_NE(cuda_of(b).kernel_choices().find("(timed choice)"), std::string::npos) << cuda_of(b).kernel_choices();
    const dmuon::NsTuner::Choice* c = cuda_of(b).ns_tuner().choice(256, 512, 1);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->detail.rfind("cache: plain", 0), 0u) << c->detail;
  }
  {  // A damaged file is ignored (timed again) and replaced by a good one.
    std::ofstream(path, std::ios::trunc) << "dmuon-ns-tuning v3\n256 512 1 4 garbage\n";
    Model c("cuda", kTimed, o, MPI_COMM_SELF);
    configure(c, -1, dir);
    c.init();
    c.grads(0);
    ASSERT_EQ(dmuon_step(c.opt), DMUON_SUCCESS) << dmuon_context_last_error(c.ctx);
    const auto d = cuda_of(c).diagnostics(key_of(c));
    EXPECT_EQ(d.ns_shapes_timed, 3);
    EXPECT_EQ(d.ns_cache_hits, 0);
    dmuon::NsCacheEntries e;
    EXPECT_TRUE(dmuon::ns_cache_read(path, e)) << slurp(path);
    EXPECT_EQ(e.size(), 3u);
  }
  {  // Binary junk of the same name: the same.
    std::ofstream(path, std::ios::trunc | std::ios::binary) << std::string("\x7f" "ELF\0\0\x01\xff", 8);
    Model c("cuda", kTimed, o, MPI_COMM_SELF);
    configure(c, -1, dir);
    c.init();
    c.grads(0);
    ASSERT_EQ(dmuon_step(c.opt), DMUON_SUCCESS) << dmuon_context_last_error(c.ctx);
    EXPECT_EQ(cuda_of(c).diagnostics(key_of(c)).ns_shapes_timed, 3);
  }
  remove_tree(dir);
}

TEST(CudaNsSymmetric, DisabledOrUnwritableCacheOnlyCostsTiming) {
  const std::string dir = temp_dir();
  const dmuon_options_t o = options();
  {  // Cache off: nothing written, nothing read.
    Model m("cuda", kTimed, o, MPI_COMM_SELF);
    configure(m, -1);
    EXPECT_TRUE(cuda_of(m).ns_tuner().cache_path().empty());
    m.init();
    m.grads(0);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    EXPECT_EQ(cuda_of(m).diagnostics(key_of(m)).ns_shapes_timed, 3);
  }
  {  // The directory cannot be made: the step succeeds and says why.
    const std::string blocker = dir + "/file";
    std::ofstream(blocker) << "x";
    Model m("cuda", kTimed, o, MPI_COMM_SELF);
    configure(m, -1, blocker + "/sub");
    m.init();
    m.grads(0);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    EXPECT_NE(cuda_of(m).kernel_choices().find("cache not written"), std::string::npos) << cuda_of(m).kernel_choices();
  }
  {  // Symmetric products off: no timing, plain everywhere.
    Model m("cuda", kTimed, o, MPI_COMM_SELF);
    configure(m, 0, dir);
    m.init();
    m.grads(0);
    ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    EXPECT_EQ(cuda_of(m).diagnostics(key_of(m)).ns_shapes_timed, 0);
    // A disabled choice is this optimizer's own, not shared through the
    // tuner: every shape says so in the backend's kernel choices.
    const std::string choices = cuda_of(m).kernel_choices();
    std::size_t off = 0;
    for (std::size_t at = choices.find("symmetric products off"); at != std::string::npos;
         at = choices.find("symmetric products off", at + 1))
      ++off;
    EXPECT_EQ(off, 5u) << choices;  // the five shapes of kTimed
  }
  // Only the blocker file: no cache file was written by any of them.
  std::FILE* ls = popen(("ls -A '" + dir + "'").c_str(), "r");
  ASSERT_NE(ls, nullptr);
  char line[512];
  int files = 0;
  while (std::fgets(line, sizeof line, ls)) ++files;
  pclose(ls);
  EXPECT_EQ(files, 1);
  remove_tree(dir);
}

// The choice (timed or forced) happens in the first step; later steps only
// enqueue, with the stream held by a kernel that waits for the host.
void never_waits_after_first_step(int symmetric, int step_graph) {
  const std::string dir = temp_dir();
  cudaStream_t user = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
  dmuon_options_t o = options();
  o.cuda_stream = user;
  o.cuda_step_graph = step_graph;
  {
    Model m("cuda", kTimed, o, MPI_COMM_SELF);
    configure(m, symmetric, dir);
    m.init();
    for (int step = 0; step < 2; ++step) {  // step 0 chooses; step 1 captures
      m.grads(step);
      ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
    }
    m.grads(2);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_NO_FATAL_FAILURE(gputest::expect_three_steps_never_wait(m, user));
  }
  cudaStreamDestroy(user);
  remove_tree(dir);
}

TEST(CudaNsSymmetric, TimedChoiceStaysInTheFirstStep) { never_waits_after_first_step(-1, 0); }
TEST(CudaNsSymmetric, ForcedSymmetricStepsNeverWait) { never_waits_after_first_step(4, 0); }
TEST(CudaNsSymmetric, ForcedSymmetricWholeStepGraphNeverWaits) { never_waits_after_first_step(4, 1); }

}  // namespace
