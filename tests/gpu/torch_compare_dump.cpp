// Runs a small mixed model through dmuon on the "cuda" backend and writes what
// torch needs to repeat it (torch_compare.py): the layout, the options, the
// initial parameters, every step's gradients, and dmuon's final parameters.
// Exit 77 (skip) when no device is visible.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gpu/gpu_model.hpp"

namespace {

const std::vector<gputest::Spec> kModel = {
    {"attn_a", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {96, 256}},
    {"attn_b", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {96, 256}},
    {"mlp_out", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 96}},
    {"proj", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {128, 128}},
    {"ln_w", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {256}},
    {"table", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {33, 7}},
    {"emb_bf16", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {1000}},
};
constexpr int kSteps = 3;

void write(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int devices = 0;
  if (argc < 2 || cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf(argc < 2 ? "usage: torch_compare_dump OUTDIR\n" : "no CUDA device: skipped\n");
    MPI_Finalize();
    return argc < 2 ? 2 : 77;
  }
  const std::string dir = argv[1];
  int failures = 0, rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  {
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.adam_lr = 1e-2;
    o.adam_weight_decay = 0.01;
    o.muon_lr = 0.02;
    o.muon_weight_decay = 0.01;
    gputest::Model m("cuda", kModel, o);
    if (!m.device) failures++;
    m.init();
    // Every rank holds the same parameters after each step; rank 0 writes them.
    std::ofstream meta(rank == 0 ? dir + "/meta.txt" : std::string("/dev/null"));
    meta << "steps " << kSteps << "\n";
    meta << "adam " << o.adam_lr << " " << o.adam_beta1 << " " << o.adam_beta2 << " " << o.adam_eps << " "
         << o.adam_weight_decay << "\n";
    meta << "muon " << o.muon_lr << " " << o.muon_momentum << " " << o.muon_nesterov << " " << o.muon_ns_steps << " "
         << o.muon_ns_eps << " " << o.muon_weight_decay << "\n";
    for (std::size_t k = 0; k < kModel.size(); ++k) {
      const auto& s = kModel[k];
      meta << "param " << s.name << " " << (s.kind == DMUON_KIND_MUON ? "muon" : "adam") << " "
           << (s.dtype == DMUON_DTYPE_FP32 ? "fp32" : "bf16");
      for (int64_t e : s.shape) meta << " " << e;
      meta << "\n";
      const std::vector<char> init = m.raw(int(k));
      if (rank == 0) write(dir + "/init_" + std::to_string(k) + ".bin", init);
    }
    for (int step = 0; step < kSteps; ++step) {
      // Each rank writes its own share; torch gets their average, the gradient the step uses.
      const auto avg = m.grads(step);
      for (std::size_t k = 0; k < kModel.size() && rank == 0; ++k) {
        std::vector<char> g(kModel[k].bytes());
        ref::store(g.data(), kModel[k].dtype, avg[k]);
        write(dir + "/grad_" + std::to_string(step) + "_" + std::to_string(k) + ".bin", g);
      }
      if (dmuon_step(m.opt) != DMUON_SUCCESS) {
        std::fprintf(stderr, "dmuon_step: %s\n", dmuon_context_last_error(m.ctx));
        failures++;
      }
    }
    for (std::size_t k = 0; k < kModel.size(); ++k) {
      const std::vector<char> final_params = m.raw(int(k));
      if (rank == 0) write(dir + "/final_" + std::to_string(k) + ".bin", final_params);
    }
  }
  MPI_Finalize();
  return failures ? 1 : 0;
}
