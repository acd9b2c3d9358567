// Writes the fuzzer's seed corpus into <corpus_dir>:
//  - seed_<n>.h5: valid checkpoints of fuzz::model() after 0, 1 and 3 steps
//    (the first with no optimizer state yet, the last with a user attribute),
//    as plain files: raw-mode inputs;
//  - recipe_<name>: structured-mode inputs ('s', a base checkpoint number,
//    then ops; fuzz/h5_recipe.hpp), one or two per op kind, so the fuzzer
//    starts from recipes that reach dmuon's checks behind the checksums.
//   make_seed_corpus <work_dir> <corpus_dir>
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_model.hpp"

namespace fs = std::filesystem;

namespace {

// Op numbers as in h5_recipe.cpp's table.
enum Op : unsigned char { kIndex, kAttrValue, kAttrRetype, kDatasetByte, kRecreate, kDelete, kAdd, kRename, kFix };

struct Recipe {
  const char* name;
  std::vector<unsigned char> bytes;  // after the 's'
};

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> r = {
      // base, op, operands...
      {"index_shape_fixed", {1, kIndex, 0, 0, 5, 5, 1, kFix}},
      {"index_offset_fixed", {2, kIndex, 1, 0, 7, 9, 3, kFix}},
      {"index_kind", {0, kIndex, 2, 0, 1, 0}},
      {"index_name_fixed", {2, kIndex, 3, 0, 0, 4, 0, 'x', kFix}},
      {"root_attr_fixed", {1, kAttrValue, 0, 0, 6, 0, 11, kFix}},
      {"hyper_attr_fixed", {2, kAttrValue, 3, 0, 2, 0, 2, kFix}},
      {"attr_retype", {1, kAttrRetype, 0, 0, 1, 3, 0, 0}},
      {"dataset_byte_fixed", {2, kDatasetByte, 7, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0x7f, kFix}},
      {"dataset_length_fixed", {2, kRecreate, 4, 0, 0, 3, kFix}},
      {"dataset_type", {1, kRecreate, 2, 0, 1, 1, kFix}},
      {"dataset_rank", {1, kRecreate, 5, 0, 2, 1}},
      {"dataset_layout", {2, kRecreate, 6, 0, 3, 0, kFix}},
      {"delete", {2, kDelete, 9, 0}},
      {"add_group", {0, kAdd, 0, 0, 0, 0}},
      {"rename", {1, kRename, 8, 0, 10, 0, kFix}},
  };
  return r;
}

}  // namespace

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
  rc = fuzz::save_seed_checkpoints(opt, work.string(), [&](int step, const std::string& file) {
    fs::copy_file(file, corpus / ("seed_" + std::to_string(step) + ".h5"), fs::copy_options::overwrite_existing);
    ++written;
  });
  if (rc != DMUON_SUCCESS) {
    std::fprintf(stderr, "save failed: %s\n", dmuon_context_last_error(ctx));
    return 1;
  }
  for (const Recipe& r : recipes()) {
    std::ofstream out(corpus / (std::string("recipe_") + r.name), std::ios::binary | std::ios::trunc);
    out.put('s');
    out.write(reinterpret_cast<const char*>(r.bytes.data()), static_cast<std::streamsize>(r.bytes.size()));
  }
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
  std::printf("%d seed checkpoints and %zu recipes in %s\n", written, recipes().size(), corpus.c_str());
  MPI_Finalize();
  return 0;
}
