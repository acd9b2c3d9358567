// Writes the fuzzer's seed corpus: valid checkpoints of fuzz::model() after
// 0, 1 and 3 steps (the first with no optimizer state yet), one with user
// attributes, copied as plain files into <corpus_dir>/seed_<n>.h5.
//   make_seed_corpus <work_dir> <corpus_dir>
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "fuzz_model.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <work_dir> <corpus_dir>\n", argv[0]);
    return 2;
  }
  const fs::path work = argv[1], corpus = argv[2];
  fs::remove_all(work);
  fs::create_directories(work);
  fs::create_directories(corpus);
  dmuon_context_t ctx = nullptr;
  int rc = dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx);
  dmuon_optimizer_t opt = rc == DMUON_SUCCESS ? fuzz::make_optimizer(ctx) : nullptr;
  if (!opt) {
    std::fprintf(stderr, "cannot build the model: %s\n", dmuon_context_last_error(ctx));
    return 1;
  }
  int written = 0;
  for (int step = 0; step <= 3; ++step) {
    if (step > 0) {
      for (int id = 0; id < static_cast<int>(fuzz::model().size()); ++id) {
        void* g = nullptr;
        int64_t n = 0;
        dmuon_param_view(opt, id, nullptr, &g);
        dmuon_param_numel(opt, id, &n);
        const bool bf16 = fuzz::model()[static_cast<std::size_t>(id)].dtype == DMUON_DTYPE_BF16;
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
      if (dmuon_step(opt) != DMUON_SUCCESS) return 1;
    }
    if (step == 2) continue;
    if (step == 3) dmuon_checkpoint_set_attribute(opt, "run", "fuzz-seed");
    const fs::path dir = work / ("s" + std::to_string(step));
    dmuon_checkpoint_options_t co = DMUON_CHECKPOINT_OPTIONS_INIT;
    co.keep_last = 1;
    if (dmuon_checkpoint_save(opt, dir.c_str(), step, &co) != DMUON_SUCCESS) {
      std::fprintf(stderr, "save failed: %s\n", dmuon_context_last_error(ctx));
      return 1;
    }
    fs::copy_file(dir / ("ckpt_" + std::to_string(step) + ".h5"), corpus / ("seed_" + std::to_string(step) + ".h5"),
                  fs::copy_options::overwrite_existing);
    ++written;
  }
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
  std::printf("%d seed checkpoints in %s\n", written, corpus.c_str());
  MPI_Finalize();
  return 0;
}
