// The model shared by the checkpoint fuzzer and its seed-corpus generator: the
// fuzzer restores into it, so a seed file gets past the model comparison and
// the mutations reach the data, checksum and value checks.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dmuon/dmuon.h"

namespace fuzz {

struct Spec {
  const char* name;
  int kind, dtype;
  std::vector<int64_t> shape;
};

inline const std::vector<Spec>& model() {
  static const std::vector<Spec> m = {
      {"w_in", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {6, 4}},  {"b_in", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {6}},
      {"w_bf16", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {4, 4}}, {"emb", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {2, 3}},
      {"gain", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {1}},
  };
  return m;
}

// An optimizer on `ctx` with model() registered and finalized; nullptr on failure.
inline dmuon_optimizer_t make_optimizer(dmuon_context_t ctx) {
  dmuon_optimizer_t opt = nullptr;
  if (dmuon_optimizer_create(ctx, nullptr, &opt) != DMUON_SUCCESS) return nullptr;
  for (const Spec& s : model())
    if (dmuon_register(opt, s.name, s.kind, s.dtype, static_cast<int>(s.shape.size()), s.shape.data(), 1, 1,
                       nullptr) != DMUON_SUCCESS) {
      dmuon_optimizer_destroy(&opt);
      return nullptr;
    }
  if (dmuon_optimizer_finalize(opt) != DMUON_SUCCESS) dmuon_optimizer_destroy(&opt);
  return opt;
}

// Gradients that depend on the parameter and the step, then one optimizer
// step: the seed checkpoints hold moments and momentum that differ per step.
inline int take_step(dmuon_optimizer_t opt, int step) {
  for (int id = 0; id < static_cast<int>(model().size()); ++id) {
    void* g = nullptr;
    int64_t n = 0;
    dmuon_param_view(opt, id, nullptr, &g);
    dmuon_param_numel(opt, id, &n);
    const bool bf16 = model()[static_cast<std::size_t>(id)].dtype == DMUON_DTYPE_BF16;
    for (int64_t i = 0; i < n; ++i) {
      const float v = 0.01f * static_cast<float>((i * 5 + id + step) % 9) - 0.04f;
      if (bf16) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        static_cast<uint16_t*>(g)[i] = static_cast<uint16_t>(u >> 16);
      } else {
        static_cast<float*>(g)[i] = v;
      }
    }
  }
  return dmuon_step(opt);
}

// Saves of the seed checkpoints: after 0, 1 and 3 steps, the last with a user
// attribute. Calls `keep(step, file)` for each committed file (in work_dir/s<step>/);
// returns DMUON_SUCCESS or the first failing status.
template <class Keep>
int save_seed_checkpoints(dmuon_optimizer_t opt, const std::string& work_dir, Keep&& keep) {
  for (int step = 0; step <= 3; ++step) {
    if (step > 0)
      if (const int rc = take_step(opt, step)) return rc;
    if (step == 2) continue;
    if (step == 3) dmuon_checkpoint_set_attribute(opt, "run", "fuzz-seed");
    const std::string dir = work_dir + "/s" + std::to_string(step);
    dmuon_checkpoint_options_t co = DMUON_CHECKPOINT_OPTIONS_INIT;
    co.keep_last = 1;
    if (const int rc = dmuon_checkpoint_save(opt, dir.c_str(), step, &co)) return rc;
    keep(step, dir + "/ckpt_" + std::to_string(step) + ".h5");
  }
  return DMUON_SUCCESS;
}

}  // namespace fuzz
