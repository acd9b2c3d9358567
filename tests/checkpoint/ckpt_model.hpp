// A small mixed model (Muon fp32/bf16 matrices beside Adam fp32/bf16
// parameters) for the checkpoint tests, with gradients chosen so that the
// average over ranks is exact for any world size: a run on N ranks then
// equals a run on M ranks bit for bit, and a restored run can be compared
// bitwise with an uninterrupted one whatever the two world sizes.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/optimizer.hpp"
#include "dmuon/dmuon.h"
#include "support/reference.hpp"

namespace ckpt_test {

struct Spec {
  std::string name;
  int kind;
  int dtype;
  std::vector<int64_t> shape;
};

inline int64_t numel(const Spec& s) {
  int64_t n = 1;
  for (auto e : s.shape) n *= e;
  return n;
}
inline std::size_t elem_bytes(int dtype) { return dtype == DMUON_DTYPE_FP32 ? 4 : 2; }

// Five matrices (more than 1..4 ranks can share evenly; fewer than 5 ranks
// each own one when restored on 5), two of one shape, fp32 and bf16.
inline std::vector<Spec> mixed_model() {
  return {
      {"w_in", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {8, 12}},
      {"b_in", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {12}},
      {"w_mid", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {16, 8}},
      {"w_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {8, 8}},
      {"emb_bf16", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {3, 5}},
      {"w_sq", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {12, 12}},
      {"gain", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {1}},
      {"w_sq2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {12, 12}},
      {"head", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {2, 3, 4}},
  };
}

// The backend of the runs: DMUON_TEST_BACKEND ("cpu" unless set), so that
// the same save and resume programs run on GPU ranks too.
inline const char* test_backend() {
  const char* b = std::getenv("DMUON_TEST_BACKEND");
  return b && *b ? b : "cpu";
}

// options.restore_gather of every ModelRun made after it is set (ckpt_tool
// resume-gather: the all-gather path of a restore on one node).
inline int& restore_gather_option() {
  static int gather = 0;
  return gather;
}

// A run on `comm` (MPI_COMM_WORLD unless told): context, optimizer, model registered and finalized.
class ModelRun {
 public:
  explicit ModelRun(const std::vector<Spec>& model, uint64_t seed = 1, MPI_Comm comm = MPI_COMM_WORLD)
      : model_(model) {
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.adam_weight_decay = 0.05;
    o.muon_weight_decay = 0.01;
    o.restore_gather = restore_gather_option();
    check(dmuon_context_create(comm, test_backend(), &ctx), "context");
    dmuon_context_rank(ctx, &rank, &world);
    check(dmuon_optimizer_create(ctx, &o, &opt), "optimizer");
    for (const Spec& s : model_)
      check(dmuon_register(opt, s.name.c_str(), s.kind, s.dtype, static_cast<int>(s.shape.size()), s.shape.data(),
                           1.0, 1.0, nullptr),
            "register");
    check(dmuon_optimizer_finalize(opt), "finalize");
    for (std::size_t k = 0; k < model_.size(); ++k) {
      std::vector<double> v(static_cast<std::size_t>(numel(model_[k])));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = ref::round_to(model_[k].dtype, 0.05 * ref::noise(seed, 100 + k, i));
      put(data(k), model_[k].dtype, v);
    }
  }
  ~ModelRun() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  ModelRun(const ModelRun&) = delete;
  ModelRun& operator=(const ModelRun&) = delete;

  void check(int status, const char* what) {
    if (status == DMUON_SUCCESS) return;
    std::fprintf(stderr, "%s failed: %s: %s\n", what, dmuon_error_string(status), dmuon_context_last_error(ctx));
    ok = false;
  }
  void* data(std::size_t k) {
    void* p = nullptr;
    dmuon_param_view(opt, static_cast<int>(k), &p, nullptr);
    return p;
  }
  void* grad(std::size_t k) {
    void* g = nullptr;
    dmuon_param_view(opt, static_cast<int>(k), nullptr, &g);
    return g;
  }
  dmuon::Optimizer& impl() { return opt->impl; }
  // Values into and bytes out of backend memory (host or device).
  void put(void* dst, int dtype, const std::vector<double>& v) {
    std::vector<char> host(v.size() * elem_bytes(dtype));
    ref::store(host.data(), dtype, v);
    impl().backend().upload(dst, host.data(), host.size());
  }
  std::vector<unsigned char> bytes(const void* src, std::size_t n) {
    std::vector<unsigned char> host(n);
    impl().backend().download(host.data(), src, n);
    return host;
  }

  // Step `step` (0-based, global): the same gradient on every rank, k/256 with
  // |k| <= 64, so sums of up to 5 copies and their average are exact in fp32
  // and bf16. Some parameters skip some steps (their Adam counts diverge).
  void step(int step) {
    for (std::size_t k = 0; k < model_.size(); ++k) {
      std::vector<double> g(static_cast<std::size_t>(numel(model_[k])));
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::round(64.0 * ref::noise(77, step, k, i)) / 256.0;
      put(grad(k), model_[k].dtype, g);
      if ((model_[k].name == "gain" && step % 3 == 1) || (model_[k].name == "emb_bf16" && step % 4 == 2) ||
          (model_[k].name == "w_sq2" && step % 3 == 2))
        check(dmuon_mark_no_grad(opt, static_cast<int>(k)), "mark_no_grad");
    }
    check(dmuon_step(opt), "step");
  }

  // Everything a checkpoint holds, as this rank sees it, labelled: parameters
  // (all ranks hold all), Muon momentum (owner only), Adam moments and step
  // counts, the optimizer step count.
  std::vector<std::pair<std::string, std::vector<unsigned char>>> state() {
    std::vector<std::pair<std::string, std::vector<unsigned char>>> out;
    auto add = [&](const std::string& label, const void* p, std::size_t n) { out.emplace_back(label, bytes(p, n)); };
    dmuon::Optimizer& o = impl();
    for (std::size_t k = 0; k < model_.size(); ++k) {
      const dmuon::ParamRecord& p = o.registry()[k];
      add(p.name + ".param", data(k), static_cast<std::size_t>(p.numel) * elem_bytes(model_[k].dtype));
      if (p.kind == dmuon::Kind::muon) {
        if (p.owner != rank) continue;
        const auto& mb = o.muon_buffers(p.dtype);
        add(p.name + ".momentum", mb.momentum + (p.offset - rank * mb.segment_elements), static_cast<std::size_t>(p.numel) * 4);
      } else {
        const auto& ab = o.adam_buffers(p.dtype);
        add(p.name + ".exp_avg", ab.exp_avg + p.offset, static_cast<std::size_t>(p.numel) * 4);
        add(p.name + ".exp_avg_sq", ab.exp_avg_sq + p.offset, static_cast<std::size_t>(p.numel) * 4);
        add(p.name + ".step", o.adam_steps() + p.adam_row, 8);
      }
    }
    int64_t steps = -1;
    dmuon_get_step_count(opt, &steps);
    const auto* sb = reinterpret_cast<const unsigned char*>(&steps);
    out.emplace_back("optimizer.step_count", std::vector<unsigned char>(sb, sb + 8));
    return out;
  }

  std::string attribute(const char* key) {
    char buf[4096] = {0};
    if (dmuon_checkpoint_get_attribute(opt, key, buf, sizeof buf) != DMUON_SUCCESS) return "<missing>";
    return buf;
  }

  std::vector<Spec> model_;
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  int rank = 0, world = 1;
  bool ok = true;
};

using State = std::vector<std::pair<std::string, std::vector<unsigned char>>>;

// The first difference between two states ("" when bitwise identical).
inline std::string first_difference(const State& a, const State& b) {
  if (a.size() != b.size()) return "different number of parts";
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return "part " + a[i].first + " vs " + b[i].first;
    if (a[i].second != b[i].second) return a[i].first + " differs";
  }
  return "";
}

// The first part of two states that differs by more than `rel` of the
// part's largest magnitude ("" when none): runs that agree to rounding, as
// runs on other rank counts or backends do (docs/determinism.md). Counts
// (Adam steps, the optimizer's) must be equal.
inline std::string first_difference_within(const State& a, const State& b, const std::vector<Spec>& model, double rel) {
  if (a.size() != b.size()) return "different number of parts";
  auto dtype_of = [&](const std::string& label) {
    for (const Spec& s : model)
      if (label == s.name + ".param") return s.dtype;
    return int(DMUON_DTYPE_FP32);  // moments and momentum are fp32
  };
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string& label = a[i].first;
    if (label != b[i].first) return "part " + label + " vs " + b[i].first;
    const bool count = label.size() > 5 && (label.substr(label.size() - 5) == ".step" || label == "optimizer.step_count");
    if (count) {
      if (a[i].second != b[i].second) return label + " differs";
      continue;
    }
    const int dtype = dtype_of(label);
    const int64_t n = static_cast<int64_t>(a[i].second.size() / elem_bytes(dtype));
    const std::vector<double> x = ref::load(a[i].second.data(), dtype, n), y = ref::load(b[i].second.data(), dtype, n);
    double scale = 0, worst = 0;
    for (int64_t j = 0; j < n; ++j) scale = std::max(scale, std::fabs(y[std::size_t(j)]));
    for (int64_t j = 0; j < n; ++j) worst = std::max(worst, std::fabs(x[std::size_t(j)] - y[std::size_t(j)]));
    if (!(worst <= rel * scale)) return label + " differs by " + std::to_string(worst) + " (scale " + std::to_string(scale) + ")";
  }
  return "";
}

// True on every rank when `mine` is true on every rank.
inline bool all_ranks(bool mine) {
  int in = mine ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return out == 1;
}

}  // namespace ckpt_test
