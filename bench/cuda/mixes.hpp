// The parameter sets of the CUDA benchmarks, shared with the torch scripts
// beside them (which build the same lists in Python: keep them in step).
#pragma once
#include <string>
#include <vector>

#include "bench_common.cuh"

namespace bench {

// ~300 Adam tensors, ~151M elements: 24 GPT-like layers of width 640 plus
// embeddings (the mix of bench_torch_adam.py).
inline std::vector<Param> adam_mix(int dtype) {
  std::vector<Param> out;
  const int64_t d = 640;
  auto add = [&](const std::string& n, std::vector<int64_t> s) { out.push_back({n, DMUON_KIND_ADAM, dtype, s}); };
  add("wte", {50304, d});
  add("wpe", {1024, d});
  for (int l = 0; l < 24; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    add(p + "ln1.w", {d});
    add(p + "ln1.b", {d});
    add(p + "attn.w", {d, 3 * d});
    add(p + "attn.b", {3 * d});
    add(p + "proj.w", {d, d});
    add(p + "proj.b", {d});
    add(p + "ln2.w", {d});
    add(p + "ln2.b", {d});
    add(p + "fc.w", {d, 4 * d});
    add(p + "fc.b", {4 * d});
    add(p + "fcproj.w", {4 * d, d});
    add(p + "fcproj.b", {d});
  }
  add("lnf.w", {d});
  add("lnf.b", {d});
  return out;
}

// GPT-2 small: 12 layers of 768x2304, 768x768, 3072x768, 768x3072 under Muon
// and 98 small Adam tensors (biases, layer norms), fp32 parameters.
inline std::vector<Param> gpt2_small_step() {
  std::vector<Param> out;
  auto muon = [&](const std::string& n, int64_t r, int64_t c) { out.push_back({n, DMUON_KIND_MUON, DMUON_DTYPE_FP32, {r, c}}); };
  auto adam = [&](const std::string& n, int64_t k) { out.push_back({n, DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {k}}); };
  for (int l = 0; l < 12; ++l) {
    const std::string p = "h" + std::to_string(l) + ".";
    muon(p + "attn.w", 768, 2304);
    muon(p + "proj.w", 768, 768);
    muon(p + "fc.w", 3072, 768);
    muon(p + "fcproj.w", 768, 3072);
    adam(p + "attn.b", 2304);
    adam(p + "proj.b", 768);
    adam(p + "fc.b", 3072);
    adam(p + "fcproj.b", 768);
    adam(p + "ln1.w", 768);
    adam(p + "ln1.b", 768);
    adam(p + "ln2.w", 768);
    adam(p + "ln2.b", 768);
  }
  adam("lnf.w", 768);
  adam("lnf.b", 768);
  return out;
}

// The small models simulations train (bench_cuda_small.cu, and in Python
// bench_torch_small.py): an MLP n_in -> width x hidden_layers -> n_out, fp32,
// Muon on the hidden width x width matrices, Adam on the first and last
// matrices and every bias. "demo": the demo's 9-64-64-64-1; "mlp256":
// 9-256-256-256-256-1.
inline std::vector<Param> small_mlp(int64_t n_in, int64_t width, int hidden_layers, int64_t n_out) {
  std::vector<Param> out;
  std::vector<int64_t> dims = {n_in};
  for (int l = 0; l < hidden_layers; ++l) dims.push_back(width);
  dims.push_back(n_out);
  const std::size_t linears = dims.size() - 1;
  for (std::size_t l = 0; l < linears; ++l) {
    const bool hidden = l > 0 && l + 1 < linears;
    out.push_back({"w" + std::to_string(l), hidden ? DMUON_KIND_MUON : DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {dims[l + 1], dims[l]}});
    out.push_back({"b" + std::to_string(l), DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {dims[l + 1]}});
  }
  return out;
}

// 1000 Adam tensors of 64 to 4096 elements (64 << (i % 7)), like the
// replicated scalars, gains and biases of small models.
inline std::vector<Param> tiny_adam(int dtype) {
  std::vector<Param> out;
  for (int i = 0; i < 1000; ++i) out.push_back({"t" + std::to_string(i), DMUON_KIND_ADAM, dtype, {int64_t{64} << (i % 7)}});
  return out;
}

}  // namespace bench
