// Save on N ranks, restore on M: the programs that CTest chains (a saver test
// sets up a directory, a restorer test requires it). Exit status 0 only when
// every check passed on every rank.
//
//   ckpt_tool save DIR S            S steps, checkpoints at steps S-2 and S
//   ckpt_tool resume DIR S K N      restore DIR (saved on N ranks), compare with
//                                   an uninterrupted S-step run, re-save and compare
//                                   the checksums, then K more steps on both
//   ckpt_tool resume-gather ...     the same, restoring with options.restore_gather = 1
//   (DMUON_TEST_BACKEND picks the backend, "cpu" by default; DMUON_TEST_TOLERANCE
//   compares resume's runs within a relative tolerance instead of bitwise)
//   ckpt_tool crash-prepare DIR S   S steps and a checkpoint at S
//   ckpt_tool crash DIR S K         restore, K steps, save at S+K (the test arms
//                                   DMUON_FAULT_POINT=save-kill@1: a rank dies mid-save)
//   ckpt_tool crash-verify DIR S K  `latest` still restores step S, nothing lost
//   ckpt_tool crash-verify-renamed DIR S K   after save-kill-before-latest@0
//   ckpt_tool reorder FILE DIR      restore FILE into its own model registered in
//                                   reverse order, save that into DIR at the same
//                                   step: a program registering in FILE's order
//                                   then restores a stored plan that is not its
//                                   own, and dmuon re-plans its storage
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ckpt_model.hpp"
#include "h5_inspect.hpp"

using namespace ckpt_test;

namespace {

int g_rank = 0;
bool g_ok = true;

void expect(bool cond, const std::string& what) {
  if (cond) return;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
  g_ok = false;
}

void expect_same(const State& a, const State& b, const std::string& when) {
  const std::string diff = first_difference(a, b);
  expect(diff.empty(), when + ": " + diff);
}

// resume against an uninterrupted run: bitwise, or within DMUON_TEST_TOLERANCE
// (relative) where the two runs may round differently (another rank count on
// NCCL and cuBLAS, or the checkpoint of another backend: docs/determinism.md).
void expect_agree(const State& a, const State& b, const std::string& when) {
  const char* tol = std::getenv("DMUON_TEST_TOLERANCE");
  if (!tol || !*tol) return expect_same(a, b, when);
  const std::string diff = first_difference_within(a, b, mixed_model(), std::atof(tol));
  expect(diff.empty(), when + " (within " + tol + "): " + diff);
}

void fresh_directory(const std::string& dir) {
  if (g_rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

void save(ModelRun& run, const std::string& dir, int64_t step) {
  dmuon_checkpoint_options_t o = DMUON_CHECKPOINT_OPTIONS_INIT;
  o.keep_last = 0;
  run.check(dmuon_checkpoint_save(run.opt, dir.c_str(), step, &o), "save");
}

int mode_save(const std::string& dir, int s) {
  fresh_directory(dir);
  ModelRun a(mixed_model());
  dmuon_checkpoint_set_attribute(a.opt, "saved_on", std::to_string(a.world).c_str());
  for (int i = 0; i < s; ++i) {
    a.step(i);
    if (i + 1 == s - 2) save(a, dir, s - 2);
  }
  save(a, dir, s);
  expect(a.ok, "saving");
  expect(read_text(dir + "/latest") == "ckpt_" + std::to_string(s) + ".h5", "latest names the last checkpoint");
  return 0;
}

int mode_resume(const std::string& dir, int s, int k, int saved_on) {
  ModelRun b(mixed_model(), /*seed=*/2);  // different parameters: the restore must replace them all
  int64_t user_step = -1;
  b.check(dmuon_checkpoint_restore(b.opt, dir.c_str(), &user_step), "restore");
  expect(user_step == s, "restored user step " + std::to_string(user_step) + ", expected " + std::to_string(s));
  expect(b.attribute("saved_on") == std::to_string(saved_on), "user attribute 'saved_on'");
  expect(b.attribute("dmuon.saved_world_size") == std::to_string(saved_on), "dmuon.saved_world_size");
  expect(b.attribute("dmuon.plan") == (saved_on == b.world ? "replayed" : "replanned"),
         "dmuon.plan is '" + b.attribute("dmuon.plan") + "'");
  expect(b.attribute("dmuon.fallback").empty(), "no fallback expected");

  ModelRun a(mixed_model());
  for (int i = 0; i < s; ++i) a.step(i);
  expect_agree(a.state(), b.state(), "right after restore");

  // Saving the restored state on this world size gives the same checksums:
  // the format and its CRCs do not depend on the number of ranks.
  const std::string again = dir + "_resaved_np" + std::to_string(b.world);
  fresh_directory(again);
  save(b, again, s);
  if (b.rank == 0) {
    auto original = dataset_crcs(dir + "/ckpt_" + std::to_string(s) + ".h5");
    auto resaved = dataset_crcs(again + "/ckpt_" + std::to_string(s) + ".h5");
    // The index holds the plan (owners), which depends on the world size by design.
    expect(original.count("/index") && resaved.count("/index") && original.size() > 4, "datasets missing");
    original.erase("/index");
    resaved.erase("/index");
    for (const auto& [path, crc] : original)
      expect(resaved.count(path) && resaved.at(path) == crc, "checksum of " + path + " differs between world sizes");
  }

  for (int i = s; i < s + k; ++i) {
    a.step(i);
    b.step(i);
  }
  expect_agree(a.state(), b.state(), "after " + std::to_string(k) + " more steps");
  expect(a.ok && b.ok, "library calls");
  return 0;
}

int mode_crash_prepare(const std::string& dir, int s) {
  fresh_directory(dir);
  ModelRun a(mixed_model());
  for (int i = 0; i < s; ++i) a.step(i);
  save(a, dir, s);
  expect(a.ok, "saving");
  return 0;
}

int mode_crash(const std::string& dir, int s, int k) {
  ModelRun a(mixed_model(), 2);
  a.check(dmuon_checkpoint_restore(a.opt, dir.c_str(), nullptr), "restore");
  for (int i = s; i < s + k; ++i) a.step(i);
  save(a, dir, s + k);  // a rank is killed in here
  return 0;             // reaching this means the fault point did not fire
}

int mode_crash_verify(const std::string& dir, int s, int k) {
  const std::string killed = dir + "/ckpt_" + std::to_string(s + k) + ".h5";
  if (g_rank == 0) {
    // The killed save left its temporary file, and nothing else moved.
    expect(std::filesystem::exists(killed + ".tmp"), "the killed save left no " + killed + ".tmp (did it run?)");
    expect(!std::filesystem::exists(killed), killed + " must not exist");
    expect(read_text(dir + "/latest") == "ckpt_" + std::to_string(s) + ".h5", "latest still names step " + std::to_string(s));
  }
  ModelRun b(mixed_model(), 2);
  int64_t user_step = -1;
  b.check(dmuon_checkpoint_restore(b.opt, dir.c_str(), &user_step), "restore");
  expect(user_step == s, "restored step");
  ModelRun a(mixed_model());
  for (int i = 0; i < s; ++i) a.step(i);
  expect_same(a.state(), b.state(), "restored after the crash");
  // Life goes on: the same save now succeeds and clears the leftover.
  for (int i = s; i < s + k; ++i) b.step(i);
  save(b, dir, s + k);
  if (g_rank == 0) {
    expect(std::filesystem::exists(killed) && !std::filesystem::exists(killed + ".tmp"), "save after the crash");
    expect(read_text(dir + "/latest") == "ckpt_" + std::to_string(s + k) + ".h5", "latest moved");
  }
  expect(a.ok && b.ok, "library calls");
  return 0;
}

// Rank 0 died after renaming the new file but before moving `latest`: the
// new file is complete, `latest` still names the previous one and wins.
int mode_crash_verify_renamed(const std::string& dir, int s, int k) {
  const std::string renamed = dir + "/ckpt_" + std::to_string(s + k) + ".h5";
  if (g_rank == 0) {
    expect(std::filesystem::exists(renamed) && !std::filesystem::exists(renamed + ".tmp"), "the rename happened");
    expect(read_text(dir + "/latest") == "ckpt_" + std::to_string(s) + ".h5", "latest still names step " + std::to_string(s));
  }
  ModelRun b(mixed_model(), 2);
  int64_t user_step = -1;
  b.check(dmuon_checkpoint_restore(b.opt, dir.c_str(), &user_step), "restore");
  expect(user_step == s, "latest is followed");
  ModelRun a(mixed_model());
  for (int i = 0; i < s; ++i) a.step(i);
  expect_same(a.state(), b.state(), "restored through latest");
  // The renamed file is itself complete.
  ModelRun c(mixed_model(), 3);
  c.check(dmuon_checkpoint_restore(c.opt, renamed.c_str(), &user_step), "restore of the renamed file");
  expect(user_step == s + k, "renamed file's step");
  for (int i = s; i < s + k; ++i) a.step(i);
  expect_same(a.state(), c.state(), "the renamed file holds step S+K");
  expect(a.ok && b.ok && c.ok, "library calls");
  return 0;
}

// The model that saved `file`, in its registration order.
std::vector<Spec> saved_model(const std::string& file) {
  std::vector<Spec> model;
  for (const dmuon::ckpt::IndexRow& r : read_index(file))
    model.push_back({r.name, r.kind, r.dtype, std::vector<int64_t>(r.shape.begin(), r.shape.begin() + r.ndim)});
  return model;
}

// Rank of each Muon matrix's owner, by name.
std::map<std::string, int> owners(ModelRun& run) {
  std::map<std::string, int> out;
  for (std::size_t k = 0; k < run.model_.size(); ++k) {
    int owner = -1;
    run.check(dmuon_param_owner(run.opt, static_cast<int>(k), &owner), "param_owner");
    if (run.model_[k].kind == DMUON_KIND_MUON) out[run.model_[k].name] = owner;
  }
  return out;
}

int mode_reorder(const std::string& file, const std::string& dir) {
  std::vector<Spec> model = saved_model(file);
  expect(!model.empty(), "cannot read the index of " + file);
  if (model.empty()) return 0;
  const std::vector<Spec> forward = model;
  std::reverse(model.begin(), model.end());
  // On the world size that saved it a restore replays the stored plan, on
  // another it plans for the order registered: through rank 0 alone first
  // (the Muon matrices all on rank 0), then on every rank.
  const std::string hop = dir + "_one_rank";
  fresh_directory(hop);
  fresh_directory(dir);
  MPI_Comm solo = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank == 0 ? 0 : MPI_UNDEFINED, 0, &solo);
  int64_t step = -1;
  if (g_rank == 0) {
    {
      ModelRun one(model, 1, solo);
      one.check(dmuon_checkpoint_restore(one.opt, file.c_str(), &step), "restore on one rank");
      save(one, hop, step);
      expect(one.ok, "the hop through one rank");
    }
    MPI_Comm_free(&solo);
  }
  MPI_Bcast(&step, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  ModelRun b(model);
  b.check(dmuon_checkpoint_restore(b.opt, hop.c_str(), nullptr), "restore");
  save(b, dir, step);
  expect(b.ok, "restore and save in reverse order");
  // Worth testing only when the two orders give two plans here.
  ModelRun a(forward);
  expect(owners(a) != owners(b), "the reverse order gives the same Muon plan on " + std::to_string(b.world) +
                                     " ranks: restoring " + dir + " would not re-plan");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string dir = argc > 2 ? argv[2] : "";
  auto arg = [&](int i) { return argc > i ? std::atoi(argv[i]) : -1; };
  // A gpu test (DMUON_TEST_GPU=1, whatever backend this step runs on): skipped without a usable GPU.
  const char* gpu_test = std::getenv("DMUON_TEST_GPU");
  if (gpu_test && std::string(gpu_test) == "1") {
    dmuon_context_t probe = nullptr;
    const int rc = dmuon_context_create(MPI_COMM_WORLD, "cuda", &probe);
    dmuon_context_destroy(&probe);
    if (!all_ranks(rc == DMUON_SUCCESS)) {
      if (g_rank == 0) std::printf("no usable GPU: gpu test skipped\n");
      MPI_Finalize();
      return 77;
    }
  }
  if (mode == "save" && argc == 4)
    mode_save(dir, arg(3));
  else if ((mode == "resume" || mode == "resume-gather") && argc == 6) {
    restore_gather_option() = mode == "resume-gather" ? 1 : 0;
    mode_resume(dir, arg(3), arg(4), arg(5));
  }
  else if (mode == "crash-prepare" && argc == 4)
    mode_crash_prepare(dir, arg(3));
  else if (mode == "crash" && argc == 5)
    mode_crash(dir, arg(3), arg(4));
  else if (mode == "crash-verify" && argc == 5)
    mode_crash_verify(dir, arg(3), arg(4));
  else if (mode == "crash-verify-renamed" && argc == 5)
    mode_crash_verify_renamed(dir, arg(3), arg(4));
  else if (mode == "reorder" && argc == 4)
    mode_reorder(dir, argv[3]);
  else
    expect(false, "usage: ckpt_tool save|resume|resume-gather|crash-prepare|crash|crash-verify|reorder DIR ...");
  const bool all = all_ranks(g_ok);
  if (g_rank == 0) std::printf("%s\n", all ? "PASSED" : "FAILED");
  MPI_Finalize();
  return all ? 0 : 1;
}
