// Determinism across runs: the same inputs on the same number of ranks give
// the same bytes, in separate processes (so that nothing that differs between
// runs -- addresses, timing, uninitialised memory, thread scheduling -- can
// leak into the numbers unnoticed).
//
//   determinism run <dir> <steps>          every rank: steps, then its whole state
//                                          to <dir>/state_rank<r>.bin, and a
//                                          checkpoint into <dir>/ckpt
//   determinism compare <dirA> <dirB> <nranks> <steps>
//                                          (one process) the state files byte for
//                                          byte, and every dataset and attribute
//                                          of the two checkpoints
//
// The gradients differ on every rank and are not exactly representable
// averages, so the order in which MPI sums them matters: this is the case the
// test must pin down (docs/determinism.md says where the order may change).
#include <hdf5.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "h5_compat.hpp"
#include "hardening/state_snapshot.hpp"
#include "support/reference.hpp"

namespace {

struct Spec {
  const char* name;
  int kind, dtype;
  std::vector<int64_t> shape;
};
const std::vector<Spec> kModel = {
    {"w_in", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {24, 16}},   {"b_in", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {24}},
    {"w_mid", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {16, 16}},  {"w_out", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {8, 24}},
    {"emb", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {5, 7}},      {"w_mid2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {16, 16}},
    {"gain", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {1}},
};

int64_t numel(const Spec& s) {
  int64_t n = 1;
  for (int64_t e : s.shape) n *= e;
  return n;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "determinism: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void ok(int rc, dmuon_context_t ctx, const char* what) {
  if (rc != DMUON_SUCCESS) die(std::string(what) + ": " + dmuon_context_last_error(ctx));
}

int run(const std::string& dir, int steps) {
  // A committed checkpoint is never overwritten: start from an empty directory.
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (me == 0) std::filesystem::remove_all(dir + "/ckpt");
  MPI_Barrier(MPI_COMM_WORLD);
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  ok(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), nullptr, "context");
  int rank = 0, world = 1;
  dmuon_context_rank(ctx, &rank, &world);
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = 0.8;  // the norm all-reduce and the clip coefficient too
  o.muon_weight_decay = 0.02;
  ok(dmuon_optimizer_create(ctx, &o, &opt), ctx, "optimizer");
  for (const Spec& s : kModel)
    ok(dmuon_register(opt, s.name, s.kind, s.dtype, static_cast<int>(s.shape.size()), s.shape.data(), 1, 1, nullptr),
       ctx, "register");
  ok(dmuon_optimizer_finalize(opt), ctx, "finalize");
  for (std::size_t k = 0; k < kModel.size(); ++k) {
    void* p = nullptr;
    ok(dmuon_param_view(opt, static_cast<int>(k), &p, nullptr), ctx, "view");
    std::vector<double> v(static_cast<std::size_t>(numel(kModel[k])));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * ref::noise(3, 500 + k, i);
    ref::store(p, kModel[k].dtype, v);
  }
  for (int step = 0; step < steps; ++step) {
    for (std::size_t k = 0; k < kModel.size(); ++k) {
      void* g = nullptr;
      ok(dmuon_param_view(opt, static_cast<int>(k), nullptr, &g), ctx, "view");
      std::vector<double> v(static_cast<std::size_t>(numel(kModel[k])));
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = (1.0 + 0.3 * rank) * ref::noise(5, static_cast<uint64_t>(step * 64 + rank), k, i) / 3.0;
      ref::store(g, kModel[k].dtype, v);
    }
    ok(dmuon_step(opt), ctx, "step");
  }
  const hardening::Snapshot s = hardening::snapshot(opt);
  std::ofstream out(dir + "/state_rank" + std::to_string(rank) + ".bin", std::ios::binary | std::ios::trunc);
  for (const auto& part : s.parts) {
    out << part.first << '\n';
    out.write(reinterpret_cast<const char*>(part.second.data()), static_cast<std::streamsize>(part.second.size()));
  }
  if (!out) die("cannot write the state file");
  out.close();
  ok(dmuon_checkpoint_save(opt, (dir + "/ckpt").c_str(), steps, nullptr), ctx, "checkpoint_save");
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
  return 0;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "<missing " + path + ">";
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Raw bytes of a dataset or attribute, read in its own file type (no conversion).
std::vector<unsigned char> read_dataset(hid_t file, const std::string& name) {
  std::vector<unsigned char> bytes;
  const hid_t d = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (d < 0) return bytes;
  const hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  bytes.resize(static_cast<std::size_t>(n) * H5Tget_size(t) + 1);
  bytes.back() = 0x5a;  // sentinel: also compares the sizes
  if (n > 0 && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0) bytes.assign(1, 0xee);
  H5Sclose(sp);
  H5Tclose(t);
  H5Dclose(d);
  return bytes;
}

struct Walk {
  hid_t other;
  std::vector<std::string> differences;
  int compared = 0;
};

herr_t compare_attribute(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  Walk& w = *static_cast<Walk*>(data);
  char path[1024];
  H5Iget_name(obj, path, sizeof path);
  auto read = [&](hid_t o) {
    std::vector<unsigned char> bytes;
    const hid_t a = H5Aopen(o, name, H5P_DEFAULT);
    if (a < 0) return bytes;
    const hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    bytes.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(sp)) * H5Tget_size(t));
    if (H5Aread(a, t, bytes.data()) < 0) bytes.assign(1, 0xee);
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return bytes;
  };
  const hid_t twin = H5Oopen(w.other, path, H5P_DEFAULT);
  ++w.compared;
  if (twin < 0 || read(obj) != read(twin)) w.differences.push_back(std::string("attribute ") + path + "@" + name);
  if (twin >= 0) H5Oclose(twin);
  return 0;
}

herr_t compare_object(hid_t file, const char* name, const dmuon::ckpt::H5ObjectInfo* info, void* data) {
  Walk& w = *static_cast<Walk*>(data);
  const hid_t obj = H5Oopen(file, name, H5P_DEFAULT);
  H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, nullptr, compare_attribute, data);
  H5Oclose(obj);
  if (info->type == H5O_TYPE_DATASET) {
    ++w.compared;
    const std::vector<unsigned char> a = read_dataset(file, name), b = read_dataset(w.other, name);
    if (a.empty() || a != b) w.differences.push_back(std::string("dataset /") + name);
  }
  return 0;
}

// Every object of a visited in b with equal bytes; and the other way round,
// so that an object only in b is noticed too.
std::vector<std::string> compare_checkpoints(const std::string& a, const std::string& b, int* compared) {
  std::vector<std::string> diffs;
  for (int pass = 0; pass < 2; ++pass) {
    const hid_t fa = H5Fopen((pass ? b : a).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t fb = H5Fopen((pass ? a : b).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (fa < 0 || fb < 0) return {"cannot open " + a + " or " + b};
    Walk w{fb, {}, 0};
    dmuon::ckpt::h5_visit(fa, compare_object, &w, H5O_INFO_BASIC);
    H5Fclose(fa);
    H5Fclose(fb);
    diffs.insert(diffs.end(), w.differences.begin(), w.differences.end());
    if (pass == 0) *compared = w.compared;
  }
  return diffs;
}

int compare(const std::string& a, const std::string& b, int nranks, int steps) {
  int bad = 0;
  for (int r = 0; r < nranks; ++r) {
    const std::string f = "/state_rank" + std::to_string(r) + ".bin";
    const std::string sa = slurp(a + f), sb = slurp(b + f);
    if (sa.rfind("<missing", 0) == 0 || sa != sb) {
      std::fprintf(stderr, "rank %d: state differs (%zu vs %zu bytes)\n", r, sa.size(), sb.size());
      ++bad;
    }
  }
  const std::string ck = "/ckpt/ckpt_" + std::to_string(steps) + ".h5";
  int compared = 0;
  for (const std::string& d : compare_checkpoints(a + ck, b + ck, &compared)) {
    std::fprintf(stderr, "checkpoint: %s differs\n", d.c_str());
    ++bad;
  }
  if (compared < 10) {  // a visit that saw (almost) nothing proves nothing
    std::fprintf(stderr, "checkpoint: only %d objects compared\n", compared);
    ++bad;
  }
  std::printf("%d ranks: state files and %d checkpoint objects compared, %d differences\n", nranks, compared, bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  int rc = 2;
  if (mode == "run" && argc == 4)
    rc = run(argv[2], std::atoi(argv[3]));
  else if (mode == "compare" && argc == 6)
    rc = compare(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]));
  else
    std::fprintf(stderr, "usage: determinism run <dir> <steps> | compare <dirA> <dirB> <nranks> <steps>\n");
  MPI_Finalize();
  return rc;
}
