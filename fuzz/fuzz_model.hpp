// The model shared by the checkpoint fuzzer and its seed-corpus generator: the
// fuzzer restores into it, so a seed file gets past the model comparison and
// the mutations reach the data, checksum and value checks.
#pragma once
#include <cstdint>
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

}  // namespace fuzz
