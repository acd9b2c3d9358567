// Save: every rank writes the slices it owns straight from the flat buffers
// (its Muon matrices, its even share of the replicated Adam buffers) into one
// canonical file, written as NAME.tmp and committed by rename.
#include <csignal>
#include <cstring>
#include <future>
#include <set>
#include <system_error>
#include <type_traits>

#include "atomic_files.hpp"
#include "core/fault_points.hpp"
#include "hdf5_io/checkpoint.hpp"
#include "collective.hpp"
#include "core/error.hpp"
#include "direct_chunks.hpp"
#include "file_seal.hpp"
#include "format.hpp"
#include "h5_util.hpp"
#include "transfer.hpp"

namespace dmuon::ckpt {

namespace {

struct SaveJobs {
  std::vector<DatasetJob> jobs;        // data datasets, in file order
  std::vector<std::vector<char>> staging;  // device backends: host copies of the pieces
  std::vector<unsigned char> index_bytes;
  H5Id index_type;
  // Fletcher32 of the data chunks, summed over the ranks: job i's chunks are
  // parts[first_part[i]] onwards.
  std::vector<std::size_t> first_part;
  std::vector<Fletcher32Part> parts;
};

DatasetJob data_job(const std::string& path, Dtype d, Buffer b, std::vector<Piece> pieces, void* base,
                    int64_t base_elements, int64_t total) {
  DatasetJob j;
  j.path = path;
  j.file_type = file_type(d, b);
  j.elem = element_size(d, b);
  j.total = total;
  j.chunk = kChunkElements;
  j.pieces = merge_pieces(std::move(pieces));
  j.host = static_cast<char*>(base);
  j.host_elements = base_elements;
  j.element_type = stored_as_bf16(d, b) ? "bfloat16" : "float32";
  j.direct = true;
  return j;
}

// Device memory: copy this rank's pieces into a compact host buffer and
// re-point the job at it (the CUDA backend's downloads of 1 MiB or more go
// through its pinned staging).
void stage(const StateAccess& state, DatasetJob& job, std::vector<char>& store) {
  int64_t n = 0;
  for (const Piece& p : job.pieces) n += p.count;
  store.resize(static_cast<std::size_t>(n) * job.elem);
  int64_t at = 0;
  for (Piece& p : job.pieces) {
    state.download(store.data() + at * static_cast<int64_t>(job.elem), job.host + p.mem * static_cast<int64_t>(job.elem),
                     static_cast<std::size_t>(p.count) * job.elem);
    p.mem = at;
    at += p.count;
  }
  job.host = store.data();
  job.host_elements = n;
}

SaveJobs build_jobs(const StateAccess& state, int rank, int world) {
  const Plan plan{state.params(), state.layout(), world};
  const auto& params = plan.params;
  const Canonical c = canonical_layout(params);
  SaveJobs s;
  // In the order Storage::describe lists the buffers: the file's order.
  for (const StateBuffer& b : state.buffers()) {
    const int64_t total = dataset_elements(b, c);
    if (total > 0)
      s.jobs.push_back(data_job(dataset_path(b.kind, b.dtype, b.role), b.dtype, b.role, rank_pieces(b, plan, c, rank),
                                b.data, b.elements, total));
  }
  if (!c.adam_params.empty()) {
    DatasetJob j;
    j.path = kAdamStepPath;
    j.file_type = H5T_STD_I64LE;
    j.elem = 8;
    j.total = static_cast<int64_t>(c.adam_params.size());
    j.chunk = 1 << 16;
    // Small and the same on every rank: rank 0 writes it whole through HDF5.
    std::vector<Piece> pieces;
    for (int64_t k = 0; rank == 0 && k < j.total; ++k) pieces.push_back({k, params[static_cast<std::size_t>(c.adam_params[static_cast<std::size_t>(k)])].adam_row, 1});
    j.pieces = merge_pieces(std::move(pieces));
    j.host = reinterpret_cast<char*>(state.adam_steps());
    j.host_elements = plan.layout.num_adam_rows;
    j.element_type = "int64";
    s.jobs.push_back(std::move(j));
  }
  if (!state.host_memory()) {
    s.staging.resize(s.jobs.size());
    for (std::size_t i = 0; i < s.jobs.size(); ++i) stage(state, s.jobs[i], s.staging[i]);
  }
  // The index is written by rank 0 alone (it is small and the same everywhere).
  s.index_bytes = pack_index(index_rows(params, c));
  s.index_type = h5_type(index_file_type(), DMUON_ERR_IO, "cannot build the index type");
  DatasetJob index;
  index.path = kIndexPath;
  index.file_type = s.index_type;
  index.elem = kIndexRowBytes;
  index.total = static_cast<int64_t>(params.size());
  index.chunk = 1024;
  if (rank == 0) index.pieces = {{0, 0, index.total}};
  index.host = reinterpret_cast<char*>(s.index_bytes.data());
  index.host_elements = index.total;
  index.element_type = "compound";
  s.jobs.insert(s.jobs.begin(), std::move(index));
  return s;
}

// Rank 0's view of everything stored as attributes (all ranks must write the
// same attribute values in parallel HDF5).
Metadata agreed_metadata(const StateAccess& state, MPI_Comm comm, int64_t user_step) {
  Metadata m;
  m.library_version = std::to_string(DMUON_VERSION_MAJOR) + "." + std::to_string(DMUON_VERSION_MINOR) + "." +
                      std::to_string(DMUON_VERSION_PATCH);
  m.user_step = user_step;
  m.optimizer_step = state.optimizer_step();
  m.world_size = state.world();
  m.model_hash = state.model_hash();
  m.num_params = static_cast<int64_t>(state.params().size());
  m.options = state.options();
  check_mpi(MPI_Bcast(&m.optimizer_step, 1, MPI_INT64_T, 0, comm), "MPI_Bcast (step)");
  check_mpi(MPI_Bcast(&m.options, sizeof m.options, MPI_BYTE, 0, comm), "MPI_Bcast (options)");
  static_assert(std::is_trivially_copyable_v<decltype(m.lr_schedules)>, "broadcast as bytes");
  m.has_lr_schedules = true;
  m.lr_schedules = state.lr_schedules();
  check_mpi(MPI_Bcast(&m.lr_schedules, sizeof m.lr_schedules, MPI_BYTE, 0, comm), "MPI_Bcast (schedules)");
  // Kernel choices are made per rank for the shapes it owns: keep every
  // distinct line, sorted, so the text does not depend on the world size.
  std::set<std::string> lines;
  for (const std::string& text : allgather_strings(comm, state.kernel_choices())) {
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      if (end > start) lines.insert(text.substr(start, end - start));
      start = end + 1;
    }
  }
  for (const std::string& l : lines) m.kernel_choices += l + "\n";
  std::vector<std::string> kv;
  for (const auto& [k, v] : state.user_attributes()) kv.insert(kv.end(), {k, v});
  kv = bcast_strings(comm, kv);
  for (std::size_t i = 0; i + 1 < kv.size(); i += 2) m.user[kv[i]] = kv[i + 1];
  return m;
}

// Rank 0 builds the file's HDF5 structure serially, with every chunk of the
// data datasets allocated but not written (direct_chunks.hpp); then every
// rank writes its own elements into those chunks, and the fletcher32 of the
// chunks numbered rank, rank + world, ...
void write_file(const StateAccess& state, MPI_Comm comm, const std::string& tmp, const Metadata& meta, SaveJobs& s,
                const std::vector<uint32_t>& crcs) {
  const int rank = state.rank(), world = state.world();
  std::vector<ChunkMap> maps(s.jobs.size());
  agreed(comm, [&] {
    if (rank != 0) return;
    H5Id fapl = skeleton_fapl();
    H5Id fcpl = h5_plist(H5Pcreate(H5P_FILE_CREATE), DMUON_ERR_IO, "cannot create a file creation list");
    H5Pset_obj_track_times(fcpl, 0);  // the root group too: reproducible file bytes
    // Room for the seal (file_seal.hpp) and its list of data-chunk extents:
    // at most one per chunk (fewer once neighbours merge), known before the
    // file exists, as HDF5 fixes the user block at creation.
    const int64_t block = seal_block_bytes(s.parts.size());
    h5_require(H5Pset_userblock(fcpl, static_cast<hsize_t>(block)) >= 0, DMUON_ERR_IO,
               "cannot reserve the seal's user block");
    H5Id file = h5_file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl, fapl), DMUON_ERR_IO,
                        "cannot create '" + tmp + "'");
    write_metadata(file, meta);
    for (std::size_t i = 0; i < s.jobs.size(); ++i) {
      if (s.jobs[i].direct)
        maps[i] = create_skeleton_dataset(file, s.jobs[i], crcs[i], static_cast<uint64_t>(block));
      else
        create_and_write(file, s.jobs[i], crcs[i]);
    }
    h5_require(file.close(), DMUON_ERR_IO, "cannot close '" + tmp + "'");
    // Seal now: every byte the seal covers is written (HDF5's structure and
    // the small datasets), and the data chunks, which the ranks write next,
    // are left out of it; so nothing is read back but the metadata, still in
    // the page cache.
    std::vector<SealExtent> extents;
    for (std::size_t i = 0; i < s.jobs.size(); ++i)
      for (const uint64_t a : maps[i].address) extents.push_back({a, static_cast<uint64_t>(maps[i].chunk_bytes) + 4});
    write_seal(tmp, block, std::move(extents));
  });
  // The chunk addresses, to every rank.
  for (std::size_t i = 0; i < s.jobs.size(); ++i) {
    if (!s.jobs[i].direct) continue;
    ChunkMap& m = maps[i];
    m.chunk_elements = chunk_elements_of(s.jobs[i]);
    m.chunk_bytes = m.chunk_elements * static_cast<int64_t>(s.jobs[i].elem);
    m.address.resize(static_cast<std::size_t>(chunk_count(s.jobs[i].total, m.chunk_elements)));
    check_mpi(MPI_Bcast(m.address.data(), static_cast<int>(m.address.size()), MPI_UINT64_T, 0, comm),
              "MPI_Bcast (chunk addresses)");
  }
  PosixFile out;
  agreed(comm, [&] {
    out.open_write(tmp);
    bool first_data = true;
    for (std::size_t i = 0; i < s.jobs.size(); ++i) {
      if (!s.jobs[i].direct) continue;
      write_chunks(out.fd(), tmp, s.jobs[i], maps[i]);
      write_checksums(out.fd(), tmp, maps[i], &s.parts[s.first_part[i]], rank, world);
      if (!first_data) continue;
      first_data = false;
      if (fault_armed("save-kill", rank)) std::raise(SIGKILL);
      require(!fault_armed("save-enospc", rank), DMUON_ERR_IO,
              "cannot write " + s.jobs[i].path + ": No space left on device (injected by DMUON_FAULT_POINT)");
    }
    out.close(tmp);
  });
}

}  // namespace

void save_checkpoint(StateAccess& state, const std::string& dir_arg, int64_t user_step, int keep_last) {
  MPI_Comm comm = state.comm();
  const int rank = state.rank();
  QuietHdf5 quiet;
  // Rank 0's directory names the file every rank opens.
  const std::string dir = bcast_string(comm, dir_arg);
  int64_t steps[2] = {user_step, -user_step}, max[2] = {0, 0};
  check_mpi(MPI_Allreduce(steps, max, 2, MPI_INT64_T, MPI_MAX, comm), "MPI_Allreduce (user step)");
  const std::string name = checkpoint_name(user_step);
  const std::string final_path = join_path(dir, name), tmp = final_path + ".tmp";
  agreed(comm, [&] {
    require(max[0] == -max[1], DMUON_ERR_INVALID_VALUE,
            "dmuon_checkpoint_save: ranks passed different user steps (" + std::to_string(-max[1]) + " .. " +
                std::to_string(max[0]) + ")");
    require(!dir.empty(), DMUON_ERR_INVALID_VALUE, "dmuon_checkpoint_save: the directory is empty");
    if (rank != 0) return;
    make_directories(dir);
    // A checkpoint once committed is never overwritten.
    require(!path_exists(final_path), DMUON_ERR_INVALID_VALUE,
            "dmuon_checkpoint_save: '" + final_path + "' exists already; checkpoints are never overwritten");
  });

  SaveJobs s;
  std::vector<uint32_t> crcs;
  agreed(comm, [&] { s = build_jobs(state, rank, state.world()); });
  // Both checksums in one pass over each rank's data: CRC-32C per dataset,
  // fletcher32 per chunk, each summed over the ranks.
  s.first_part.assign(s.jobs.size() + 1, 0);
  for (std::size_t i = 0; i < s.jobs.size(); ++i)
    s.first_part[i + 1] = s.first_part[i] +
        static_cast<std::size_t>(s.jobs[i].direct ? chunk_count(s.jobs[i].total, chunk_elements_of(s.jobs[i])) : 0);
  s.parts.resize(s.first_part.back());
  // The datasets are checksummed on two threads, alternately: on one core
  // the two checksums are a fifth of a save (docs/decisions.md,
  // "Measurements behind the code").
  std::vector<std::vector<CrcPiece>> pieces(s.jobs.size());
  const auto checksum_every_other = [&s, &pieces](std::size_t first) {
    for (std::size_t i = first; i < s.jobs.size(); i += 2) {
      const DatasetJob& job = s.jobs[i];
      pieces[i] = job.direct ? checksum_chunks(job, chunk_elements_of(job), &s.parts[s.first_part[i]]) : crc_pieces(job);
    }
  };
  agreed(comm, [&] {
    std::future<void> helper;
    try {
      helper = std::async(std::launch::async, checksum_every_other, 1);
    } catch (const std::system_error&) {  // no thread to be had: this one does both halves
      helper = std::async(std::launch::deferred, checksum_every_other, 1);
    }
    checksum_every_other(0);
    helper.get();
  });
  for (std::size_t i = 0; i < s.jobs.size(); ++i)
    crcs.push_back(combine_crc(comm, pieces[i], s.jobs[i].total * static_cast<int64_t>(s.jobs[i].elem)));
  sum_parts(comm, s.parts, nullptr);
  const Metadata meta = agreed_metadata(state, comm, user_step);

  try {
    write_file(state, comm, tmp, meta, s, crcs);
    // Every rank flushes what it wrote: on a parallel file system each
    // client holds its own dirty pages.
    agreed(comm, [&] {
      if (fault_armed("save-enospc-fsync", rank))
        fail(DMUON_ERR_IO, "fsync of '" + tmp + "' failed: No space left on device (injected by DMUON_FAULT_POINT)");
      fsync_path(tmp);
    });
  } catch (...) {
    if (rank == 0) remove_file(tmp);
    throw;
  }
  agreed(comm, [&] {
    if (rank != 0) return;
    try {
      rename_path(tmp, final_path);
    } catch (...) {
      remove_file(tmp);
      throw;
    }
    fsync_path(dir);
    if (fault_armed("save-kill-before-latest", 0)) std::raise(SIGKILL);
    write_latest(dir, name);
    prune(dir, keep_last);
  });
}

}  // namespace dmuon::ckpt
