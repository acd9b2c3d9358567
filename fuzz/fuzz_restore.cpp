// libFuzzer target: dmuon_checkpoint_restore of a mutated checkpoint file.
// Two modes, chosen by the input's first byte:
//  - 's': structured. The rest is a recipe (h5_recipe.hpp) applied through
//    the HDF5 API to a copy of one of three valid checkpoints, which is then
//    sealed again (hdf5_io/file_seal.hpp, seal_file: a version-2 seal listing
//    the data chunks as HDF5 now places them): the file passes the seal, is
//    well-formed HDF5, and exercises dmuon's own validation (the index,
//    shapes, types, lengths, attributes, checksums).
//  - anything else: raw. The input is the whole file (seeded with valid
//    checkpoints by make_seed_corpus): libFuzzer's byte mutations of what
//    HDF5 parses must be refused by the seal before HDF5 parses anything;
//    mutations inside data chunks (left out of the seal) by fletcher32/CRC.
// A restore must either succeed or refuse the file with a status that means
// "bad file"; a refused file must leave every byte of the optimizer as it was.
// Anything else -- another status, a changed optimizer, a crash, a leak, a
// hang (libFuzzer's -timeout) -- is a finding.
#include <mpi.h>
#include <sanitizer/lsan_interface.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "file_seal.hpp"
#include "fuzz_model.hpp"
#include "h5_recipe.hpp"
#include "hardening/state_snapshot.hpp"

namespace {

dmuon_context_t g_ctx = nullptr;
dmuon_optimizer_t g_opt = nullptr;
std::string g_path;
std::vector<std::string> g_bases;  // the structured mode's valid checkpoints, as bytes

std::string fingerprint() {
  std::ostringstream s;
  const dmuon::Optimizer& o = g_opt->impl;
  const dmuon_options_t& op = o.options();
  s.write(reinterpret_cast<const char*>(&op), sizeof op);
  for (const auto& part : hardening::snapshot(g_opt, true).parts) {
    s << '|' << part.first << ':';
    s.write(reinterpret_cast<const char*>(part.second.data()), static_cast<std::streamsize>(part.second.size()));
  }
  for (const auto& kv : o.restored_attributes) s << '|' << kv.first << '=' << kv.second;
  for (const dmuon::ParamRecord& p : o.registry().all()) s << '|' << p.owner << ' ' << p.offset;
  return s.str();
}

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_restore: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Open MPI keeps memory from MPI_Init, and from the first MPI-IO file open,
  // until exit. libFuzzer checks for leaks after inputs, and a check reports
  // every unreachable block, old ones too: so set-up runs with leak tracking
  // off, and includes one save and one restore to load the MPI-IO components.
  __lsan_disable();
  MPI_Init(argc, argv);
  if (dmuon_context_create(MPI_COMM_WORLD, "cpu", &g_ctx) != DMUON_SUCCESS) finding("context_create failed");
  g_opt = fuzz::make_optimizer(g_ctx);
  if (!g_opt) finding(std::string("cannot build the model: ") + dmuon_context_last_error(g_ctx));
  const char* dir = std::getenv("DMUON_FUZZ_TMP");
  const std::string tmp = dir ? dir : "/tmp";
  g_path = tmp + "/dmuon_fuzz_" + std::to_string(getpid()) + ".h5";
  const std::string warm = tmp + "/dmuon_fuzz_warmup_" + std::to_string(getpid());
  dmuon_checkpoint_options_t keep_one = DMUON_CHECKPOINT_OPTIONS_INIT;
  keep_one.keep_last = 1;
  if (dmuon_checkpoint_save(g_opt, warm.c_str(), 0, &keep_one) != DMUON_SUCCESS ||
      dmuon_checkpoint_restore(g_opt, warm.c_str(), nullptr) != DMUON_SUCCESS)
    finding(std::string("warm-up save/restore failed: ") + dmuon_context_last_error(g_ctx));
  // The same checkpoints as the raw seeds (make_seed_corpus), kept in memory
  // as the bases of structured inputs.
  const int rc = fuzz::save_seed_checkpoints(g_opt, warm + "_bases", [](int, const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    g_bases.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  });
  if (rc != DMUON_SUCCESS || g_bases.size() != 3)
    finding(std::string("cannot save the base checkpoints: ") + dmuon_context_last_error(g_ctx));
  __lsan_enable();
  // Registered after HDF5's own exit handler, so it runs first: HDF5 then
  // closes a library with nothing open.
  std::atexit([] {
    dmuon_optimizer_destroy(&g_opt);
    dmuon_context_destroy(&g_ctx);
    std::remove(g_path.c_str());
    MPI_Finalize();
  });
  return 0;
}

namespace {

// Structured input: base checkpoint data[1] % 3, edited by the recipe
// data[2..], sealed again.
void write_structured(const uint8_t* data, size_t size) {
  const std::string& base = g_bases[size > 1 ? data[1] % g_bases.size() : 0];
  std::ofstream(g_path, std::ios::binary | std::ios::trunc).write(base.data(), static_cast<std::streamsize>(base.size()));
  if (size > 2) fuzz::apply_recipe(g_path, data + 2, size - 2);
  try {
    dmuon::ckpt::seal_file(MPI_COMM_SELF, g_path);
  } catch (const dmuon::Error& e) {
    finding(std::string("cannot seal the edited file: ") + e.what());
  }
}

void write_raw(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(g_path.c_str(), "wb");
  if (!f) finding("cannot write " + g_path);
  if (size && std::fwrite(data, 1, size, f) != size) finding("short write to " + g_path);
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == 's')
    write_structured(data, size);
  else
    write_raw(data, size);

  const std::string before = fingerprint();
  int64_t user_step = -12345;
  const int rc = dmuon_checkpoint_restore(g_opt, g_path.c_str(), &user_step);
  // Which check an input reaches, for looking at seeds and findings by hand.
  static const bool verbose = std::getenv("DMUON_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "fuzz_restore: %s: %s\n", dmuon_error_string(rc), dmuon_context_last_error(g_ctx));
  switch (rc) {
    case DMUON_SUCCESS:
      return 0;  // the mutation kept the file valid (or touched nothing checked)
    case DMUON_ERR_CHECKPOINT_CORRUPT:
    case DMUON_ERR_CHECKPOINT_MISMATCH:
    case DMUON_ERR_IO:
    case DMUON_ERR_NOT_SUPPORTED:
      break;
    default:
      finding(std::string("restore returned ") + dmuon_error_string(rc) + ": " + dmuon_context_last_error(g_ctx));
  }
  if (user_step != -12345) finding("a refused restore wrote user_step");
  if (fingerprint() != before)
    finding(std::string("a refused restore changed the optimizer (") + dmuon_error_string(rc) + ": " +
            dmuon_context_last_error(g_ctx) + ")");
  return 0;
}
