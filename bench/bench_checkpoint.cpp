// Checkpoint save and restore bandwidth beside a plain POSIX write+fsync and
// read of the same number of bytes, to the same directory, in the same run.
//
// The payload is what the file holds: Muon parameters and momentum, Adam
// parameters and both moments (fp32). The raw baseline has every rank pwrite
// its share of one file (the same split dmuon uses), then fsync; the read
// baseline preads it back. Before each read the page cache of both files is
// dropped (posix_fadvise DONTNEED on the clean, fsynced pages), so both reads
// come from the device. Repetitions alternate which of the two goes first.
// Save time includes everything dmuon does (checksums, HDF5, the data
// writes, the seal, fsync, rename, `latest`); restore time includes the seal
// check, verification, the all-gathers and the copy into the optimizer.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "core/optimizer.hpp"
#include "dmuon/dmuon.h"

namespace po = boost::program_options;

namespace {

using bench::check;
using bench::now;

// Each rank moves [rank*share, (rank+1)*share) of `bytes` with pwrite/pread in 8 MiB blocks.
double raw_io(const std::string& path, std::vector<char>& buf, int64_t bytes, int rank, int world, bool write) {
  const int64_t first = bytes * rank / world, last = bytes * (rank + 1) / world;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  const int fd = ::open(path.c_str(), write ? (O_WRONLY | O_CREAT) : O_RDONLY, 0644);
  if (fd < 0) MPI_Abort(MPI_COMM_WORLD, 3);
  constexpr int64_t kBlock = 8 << 20;
  for (int64_t at = first; at < last; at += kBlock) {
    const int64_t n = std::min(kBlock, last - at);
    const ssize_t got = write ? ::pwrite(fd, buf.data() + (at - first), static_cast<size_t>(n), at)
                              : ::pread(fd, buf.data() + (at - first), static_cast<size_t>(n), at);
    if (got != n) MPI_Abort(MPI_COMM_WORLD, 4);
  }
  if (write) ::fsync(fd);
  ::close(fd);
  MPI_Barrier(MPI_COMM_WORLD);
  return now() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  po::options_description desc("bench_checkpoint: checkpoint save/restore bandwidth vs raw POSIX I/O");
  std::string dir;
  double size_mb = 1024, muon_fraction = 0.5;
  int matrix = 1024, reps = 3, adam_tensors = 64;
  desc.add_options()("help", "this text")("dir", po::value(&dir)->default_value("bench_ckpt_dir"),
                                          "directory for the checkpoint and the raw file (emptied first)")(
      "size-mb", po::value(&size_mb)->default_value(1024), "checkpoint payload in MB (1e6 bytes)")(
      "muon-fraction", po::value(&muon_fraction)->default_value(0.5), "share of the payload that is Muon state")(
      "matrix", po::value(&matrix)->default_value(1024), "Muon matrices are matrix x matrix fp32")(
      "adam-tensors", po::value(&adam_tensors)->default_value(64), "number of Adam tensors")(
      "reps", po::value(&reps)->default_value(3), "repetitions (the best of each is reported)");
  po::variables_map vm;
  if (!bench::parse_options(argc, argv, desc, vm)) {
    MPI_Finalize();
    return 2;
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (vm.count("help")) {
    if (rank == 0) std::printf("%s\n", bench::help_text(desc).c_str());
    MPI_Finalize();
    return 0;
  }

  // Model: Muon fp32 square matrices (param + momentum: 8 B/element in the
  // file) and Adam fp32 vectors (param + 2 moments: 12 B/element).
  const double bytes_target = size_mb * 1e6;
  const int64_t mat_elems = static_cast<int64_t>(matrix) * matrix;
  const int n_mat = std::max(0, static_cast<int>(bytes_target * muon_fraction / (8.0 * mat_elems) + 0.5));
  const int64_t adam_elems = std::max<int64_t>(1, static_cast<int64_t>((bytes_target - 8.0 * n_mat * mat_elems) / 12.0 / adam_tensors));
  const int64_t payload = 8 * n_mat * mat_elems + 12 * adam_elems * adam_tensors;

  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  check(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), ctx, "context");
  check(dmuon_optimizer_create(ctx, nullptr, &opt), ctx, "optimizer");
  for (int i = 0; i < n_mat; ++i) {
    const int64_t shape[2] = {matrix, matrix};
    check(dmuon_register(opt, ("w" + std::to_string(i)).c_str(), DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, shape, 1, 1, nullptr), ctx, "register");
  }
  for (int i = 0; i < adam_tensors; ++i) {
    const int64_t shape[1] = {adam_elems};
    check(dmuon_register(opt, ("b" + std::to_string(i)).c_str(), DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, shape, 1, 1, nullptr), ctx, "register");
  }
  check(dmuon_optimizer_finalize(opt), ctx, "finalize");
  // Non-trivial contents everywhere the file reads from.
  dmuon::Optimizer& o = opt->impl;
  auto fill = [](void* p, int64_t n, float seed) {
    float* f = static_cast<float*>(p);
    for (int64_t i = 0; i < n; ++i) f[i] = seed + 1e-3f * static_cast<float>(i % 9973);
  };
  fill(o.muon_buffers(dmuon::Dtype::fp32).param, o.muon_buffers(dmuon::Dtype::fp32).segment_elements * world, 1.f);
  fill(o.muon_buffers(dmuon::Dtype::fp32).momentum, o.muon_buffers(dmuon::Dtype::fp32).segment_elements, 2.f);
  const auto& ab = o.adam_buffers(dmuon::Dtype::fp32);
  fill(ab.param, ab.elements, 3.f);
  fill(ab.exp_avg, ab.elements, 4.f);
  fill(ab.exp_avg_sq, ab.elements, 5.f);

  const std::string raw = dir + "/raw.bin";
  std::vector<char> buf(static_cast<std::size_t>(payload / world + 1), 7);
  double best[4] = {1e30, 1e30, 1e30, 1e30};  // raw write, save, raw read, restore
  for (int r = 0; r < reps; ++r) {
    if (rank == 0) {
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string ckpt = dir + "/ckpt_" + std::to_string(r) + ".h5";
    // Odd repetitions run dmuon first: whichever goes second meets the
    // device still busy with the first one's writes (on a VM a just-written
    // file also reads back slower), and best-of-reps then sees both orders.
    const bool dmuon_first = r % 2 == 1;
    const auto raw_write = [&] { best[0] = std::min(best[0], raw_io(raw, buf, payload, rank, world, true)); };
    const auto save = [&] {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      check(dmuon_checkpoint_save(opt, dir.c_str(), r, nullptr), ctx, "save");
      MPI_Barrier(MPI_COMM_WORLD);
      best[1] = std::min(best[1], now() - t0);
    };
    const auto raw_read = [&] { best[2] = std::min(best[2], raw_io(raw, buf, payload, rank, world, false)); };
    const auto restore = [&] {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      check(dmuon_checkpoint_restore(opt, ckpt.c_str(), nullptr), ctx, "restore");
      MPI_Barrier(MPI_COMM_WORLD);
      best[3] = std::min(best[3], now() - t0);
    };
    if (dmuon_first) {
      save();
      raw_write();
    } else {
      raw_write();
      save();
    }
    bench::evict_page_cache(raw);
    bench::evict_page_cache(ckpt);
    MPI_Barrier(MPI_COMM_WORLD);
    if (dmuon_first) {
      restore();
      raw_read();
    } else {
      raw_read();
      restore();
    }
  }
  if (rank == 0) {
    const double mb = static_cast<double>(payload) / 1e6;
    std::printf("ranks=%d payload_MB=%.0f muon_matrices=%d adam_tensors=%d reps=%d raw_write_MBps=%.0f save_MBps=%.0f "
                "save_ratio=%.2f raw_read_MBps=%.0f restore_MBps=%.0f restore_ratio=%.2f\n",
                world, mb, n_mat, adam_tensors, reps, mb / best[0], mb / best[1], best[0] / best[1], mb / best[2],
                mb / best[3], best[2] / best[3]);
  }
  if (rank == 0) std::filesystem::remove_all(dir);
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
  MPI_Finalize();
  return 0;
}
