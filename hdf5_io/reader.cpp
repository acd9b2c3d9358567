// Restore: read and verify everything into host staging first (index against
// the registered model, every dataset's fletcher32 and CRC-32C, the metadata
// checksum), agree on the outcome across ranks, and only then replace the
// optimizer's state. Each rank reads its own Muon matrices (under the plan it
// will use) and an even share of the Adam buffers; all-gathers complete them.
#include <algorithm>
#include <map>

#include "atomic_files.hpp"
#include "checkpoint.hpp"
#include "collective.hpp"
#include "core/error.hpp"
#include "crc32c.hpp"
#include "direct_chunks.hpp"
#include "file_seal.hpp"
#include "format.hpp"
#include "h5_util.hpp"
#include "transfer.hpp"

namespace dmuon::ckpt {
namespace {

constexpr int kCorrupt = DMUON_ERR_CHECKPOINT_CORRUPT;
constexpr int kMismatch = DMUON_ERR_CHECKPOINT_MISMATCH;

// Everything a restore commits, verified, in the layout the optimizer will have.
struct Restored {
  Metadata meta;
  dmuon_options_t options{};
  std::vector<int> owners;  // per Muon parameter, registration order
  bool replayed = false;
  Layout layout;
  std::array<HostBuffer, kNumDtypes> muon_param;     // full owner-major buffer
  std::array<HostBuffer, kNumDtypes> muon_momentum;  // this rank's segment (fp32)
  std::array<HostBuffer, kNumDtypes> adam_param;     // full padded buffers
  std::array<HostBuffer, kNumDtypes> adam_m, adam_v;
  std::vector<int64_t> adam_steps;  // per Adam row
};

std::string describe_row(const IndexRow& r) {
  std::string s = "'" + r.name + "' (" + (r.kind == 0 ? "muon" : "adam") + ", " + (r.dtype == 0 ? "fp32" : "bf16") + ", [";
  for (int i = 0; i < r.ndim; ++i) s += (i ? " x " : "") + std::to_string(r.shape[static_cast<std::size_t>(i)]);
  return s + "])";
}

// The index must be internally consistent (else the file is damaged) before
// it is compared with the model.
void check_index_structure(const std::vector<IndexRow>& rows, const Metadata& m, Canonical& totals) {
  require(static_cast<int64_t>(rows.size()) == m.num_params, kCorrupt,
          "the index has " + std::to_string(rows.size()) + " rows, the file says " + std::to_string(m.num_params));
  for (const IndexRow& r : rows) {
    require(r.kind >= 0 && r.kind <= 1 && r.dtype >= 0 && r.dtype <= 1 && r.ndim >= 1 && r.ndim <= kMaxDims, kCorrupt,
            "index row of '" + r.name + "' is invalid");
    int64_t n = 1;
    for (int i = 0; i < r.ndim; ++i) {
      // Overflow-checked: the extents come from the file (found by the structured fuzzer).
      require(r.shape[static_cast<std::size_t>(i)] > 0 && !__builtin_mul_overflow(n, r.shape[static_cast<std::size_t>(i)], &n),
              kCorrupt, "index row of '" + r.name + "' has a bad shape");
    }
    auto& total = (r.kind == 0 ? totals.muon_total : totals.adam_total)[static_cast<std::size_t>(r.dtype)];
    require(n == r.numel && r.offset == total && !__builtin_add_overflow(total, r.numel, &total), kCorrupt,
            "index row of '" + r.name + "' is inconsistent");
  }
}

// The registered model against the file's index; the first difference names
// the parameter. Returns, per registered parameter, its index row.
std::vector<const IndexRow*> match_model(const std::vector<ParamRecord>& params, const std::vector<IndexRow>& rows) {
  std::map<std::string, const IndexRow*> by_name;
  for (const IndexRow& r : rows) by_name[r.name] = &r;
  std::vector<const IndexRow*> match;
  for (const ParamRecord& p : params) {
    auto it = by_name.find(p.name);
    require(it != by_name.end(), kMismatch,
            "parameter " + p.describe() + " is registered but not in the checkpoint");
    const IndexRow& r = *it->second;
    bool same = r.kind == static_cast<int>(p.kind) && r.dtype == static_cast<int>(p.dtype) &&
                r.ndim == static_cast<int>(p.shape.size());
    for (std::size_t i = 0; same && i < p.shape.size(); ++i) same = r.shape[i] == p.shape[i];
    require(same, kMismatch, "parameter '" + p.name + "': the checkpoint has " + describe_row(r) +
                                 ", the model registered " + p.describe());
    match.push_back(&r);
    by_name.erase(it);
  }
  require(by_name.empty(), kMismatch,
          by_name.empty() ? "" : "the checkpoint has parameter " + describe_row(*by_name.begin()->second) +
                                     " that the model did not register");
  return match;
}

DatasetJob job_for(const std::string& path, hid_t type, std::size_t elem, int64_t total, std::vector<Piece> pieces,
                   void* host, int64_t host_elements) {
  DatasetJob j;
  j.path = path;
  j.file_type = type;
  j.elem = elem;
  j.total = total;
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.file < b.file; });
  j.pieces = merge_pieces(std::move(pieces));
  j.host = static_cast<char*>(host);
  j.host_elements = host_elements;
  return j;
}

// The open file as the readers see it: HDF5 for metadata, a plain file
// descriptor for the data chunks, and where HDF5's addresses start.
struct OpenFile {
  H5Id h5;
  PosixFile raw;
  uint64_t base = 0;  // user block bytes
  std::string path;
};

// Read this rank's pieces (its chunks directly when the dataset's layout
// allows, on every rank, else through HDF5) and verify every chunk's
// fletcher32 and the whole dataset's CRC collectively.
void read_verified(MPI_Comm comm, OpenFile& f, const DatasetJob& job) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  uint32_t stored = 0;
  H5Id dset;
  ChunkMap map;
  int direct = 0;
  agreed(comm, [&] {
    dset = open_for_read(f.h5, job, stored);
    direct = direct_chunk_map(dset, job, f.base, rank, world, map) ? 1 : 0;
  });
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &direct, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (chunk layout)");
  std::vector<CrcPiece> crcs;
  if (direct) {
    std::vector<Fletcher32Part> parts(map.address.size());
    std::vector<uint64_t> sums(map.address.size(), 0);
    agreed(comm, [&] { crcs = read_chunks(f.raw.fd(), f.path, job, map, parts.data(), sums.data(), rank, world); });
    sum_parts(comm, parts, &sums);
    agreed(comm, [&] {
      for (std::size_t k = 0; k < parts.size(); ++k)
        require(fletcher32_value(parts[k]) == sums[k], kCorrupt,
                "chunk " + std::to_string(k) + " of " + job.path + " fails its fletcher32 checksum");
    });
  } else {
    agreed(comm, [&] { read_with_hdf5(dset, job); });
    crcs = crc_pieces(job);
  }
  const uint32_t crc = combine_crc(comm, crcs, job.total * static_cast<int64_t>(job.elem));
  agreed(comm, [&] {
    require(crc == stored, kCorrupt, "the checksum of " + job.path + " does not match its data");
  });
}

Restored read_checkpoint(const Optimizer& opt, const std::string& path) {
  const dmuon_context_s& ctx = *opt.context();
  MPI_Comm comm = ctx.comm;
  const int rank = ctx.rank, world = ctx.size;
  const auto& params = opt.registry().all();
  Restored r;

  agreed(comm, [&] {
    if (rank == 0) require(path_exists(path), DMUON_ERR_NOT_FOUND, "'" + path + "' does not exist");
  });
  // HDF5 parses only files whose every byte is as written (it can crash on damaged ones).
  const int64_t sealed_block = verify_seal(comm, path);
  OpenFile file;
  file.path = path;
  agreed(comm, [&] {
    H5Id fapl = h5_plist(H5Pcreate(H5P_FILE_ACCESS), DMUON_ERR_IO, "cannot create a file access list");
    h5_require(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) >= 0, DMUON_ERR_IO, "cannot select MPI-IO");
    file.h5 = h5_file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), kCorrupt,
                      "'" + path + "' is not a readable HDF5 file (damaged or truncated)");
    H5Id fcpl = h5_plist(H5Fget_create_plist(file.h5), kCorrupt, "cannot read the file creation list of '" + path + "'");
    hsize_t user_block = 0;
    h5_require(H5Pget_userblock(fcpl, &user_block) >= 0, kCorrupt, "cannot read the user block size of '" + path + "'");
    // The seal and HDF5 must agree where HDF5's part starts, or the extents
    // the seal left out would not be the chunks HDF5 points to.
    require(user_block == static_cast<hsize_t>(sealed_block), kCorrupt,
            "'" + path + "': HDF5 says its user block is " + std::to_string(user_block) + " bytes, the seal says " +
                std::to_string(sealed_block));
    file.base = user_block;
    file.raw.open_read(path);
  });

  std::vector<IndexRow> rows;
  std::vector<const IndexRow*> match;
  agreed(comm, [&] {
    r.meta = read_metadata(file.h5);
    {  // num_params sizes an allocation: it must match /index's length first (found by the structured fuzzer)
      H5Id ds = h5_dataset(H5Dopen2(file.h5, kIndexPath, H5P_DEFAULT), kCorrupt, "cannot open /index");
      H5Id space = h5_space(H5Dget_space(ds), kCorrupt, "cannot read the shape of /index");
      const hssize_t rows_in_file = H5Sget_simple_extent_npoints(space);
      require(rows_in_file == r.meta.num_params, kCorrupt,
              "the index has " + std::to_string(rows_in_file) + " rows, the file says " + std::to_string(r.meta.num_params));
    }
    std::vector<unsigned char> bytes(static_cast<std::size_t>(std::max<int64_t>(r.meta.num_params, 0)) * kIndexRowBytes);
    H5Id type = h5_type(index_file_type(), DMUON_ERR_IO, "cannot build the index type");
    const DatasetJob index = job_for(kIndexPath, type, kIndexRowBytes, r.meta.num_params,
                                     {{0, 0, r.meta.num_params}}, bytes.data(), r.meta.num_params);
    const uint32_t stored = read_pieces(file.h5, index);
    require(crc32c(bytes.data(), bytes.size()) == stored, kCorrupt, "the checksum of /index does not match");
    rows = unpack_index(bytes);
    Canonical totals;
    check_index_structure(rows, r.meta, totals);
    match = match_model(params, rows);
    r.options = opt.options();
    apply_restored_options(r.options, r.meta.options);
    try {
      validate_options(r.options);
    } catch (const Error& e) {
      fail(kCorrupt, std::string("the stored hyper-parameters are invalid: ") + e.what());
    }
  });

  // The plan: the stored owners on the same world size, else a deterministic re-plan.
  std::vector<ParamRecord> planned = params;
  agreed(comm, [&] {
    r.replayed = r.meta.world_size == world;
    std::vector<int> owners;
    if (r.replayed)
      for (std::size_t i = 0; i < params.size(); ++i)
        if (params[i].kind == Kind::muon) {
          const int o = match[i]->owner;
          require(o >= 0 && o < world, kCorrupt, "the stored owner of '" + params[i].name + "' is out of range");
          owners.push_back(o);
        }
    r.layout = plan_layout(planned, world, owners);
    r.owners.clear();
    for (const ParamRecord& p : planned)
      if (p.kind == Kind::muon) r.owners.push_back(p.owner);
  });

  // File-side placement of every registered parameter, from the index.
  Canonical fc;
  for (const IndexRow& row : rows)
    (row.kind == 0 ? fc.muon_total : fc.adam_total)[static_cast<std::size_t>(row.dtype)] += row.numel;
  for (std::size_t i = 0; i < params.size(); ++i) {
    fc.offset.push_back(match[i]->offset);
    if (params[i].kind == Kind::adam) fc.adam_params.push_back(static_cast<int>(i));
  }

  for (int di = 0; di < kNumDtypes; ++di) {
    const Dtype d = static_cast<Dtype>(di);
    const std::size_t es = dtype_size(d);
    const int64_t seg = r.layout.muon[static_cast<std::size_t>(di)].segment_elements;
    if (fc.muon_total[di] > 0) {
      r.muon_param[di] = HostBuffer(static_cast<std::size_t>(seg * world) * es);
      r.muon_momentum[di] = HostBuffer(static_cast<std::size_t>(seg) * 4);
      read_verified(comm, file,
                    job_for(dataset_path(Kind::muon, d, Buffer::param), file_type(d, Buffer::param), es, fc.muon_total[di],
                            muon_pieces(planned, fc, d, rank, seg, false), r.muon_param[di].data(), seg * world));
      read_verified(comm, file,
                    job_for(dataset_path(Kind::muon, d, Buffer::momentum), file_type(d, Buffer::momentum), 4,
                            fc.muon_total[di], muon_pieces(planned, fc, d, rank, seg, true), r.muon_momentum[di].data(), seg));
      agreed(comm, [&] { allgather_segments(comm, r.muon_param[di].data(), static_cast<std::size_t>(seg) * es); });
    }
    const int64_t total = fc.adam_total[di];
    if (total > 0) {
      // Each rank reads its even share of the canonical elements straight
      // into the padded image. When the shares of consecutive ranks stay in
      // order there too (the model registered in the order it was saved),
      // their padded ranges are disjoint and an in-place all-gather
      // completes the image; otherwise the shares go through a canonical
      // buffer and every parameter moves to its padded place.
      const int64_t padded = r.layout.adam_elements[static_cast<std::size_t>(di)];
      std::vector<std::vector<Piece>> share(static_cast<std::size_t>(world));
      std::vector<int64_t> counts, displs;
      bool in_order = true;
      for (int q = 0; q < world; ++q) {
        share[static_cast<std::size_t>(q)] = adam_pieces(planned, fc, d, q, world);
        int64_t first = padded, last = 0;
        for (const Piece& p : share[static_cast<std::size_t>(q)]) {
          first = std::min(first, p.mem);
          last = std::max(last, p.mem + p.count);
        }
        if (first >= last) first = last = displs.empty() ? 0 : displs.back() + counts.back();
        in_order = in_order && (displs.empty() || first >= displs.back() + counts.back());
        displs.push_back(first);
        counts.push_back(last - first);
      }
      const auto [lo, hi] = even_share(total, rank, world);
      const std::pair<Buffer, std::size_t> bufs[] = {{Buffer::param, es}, {Buffer::exp_avg, 4}, {Buffer::exp_avg_sq, 4}};
      for (const auto& entry : bufs) {
        // Plain variables, not a structured binding: C++17 lets no lambda capture one.
        const Buffer b = entry.first;
        const std::size_t size = entry.second;
        const std::string dpath = dataset_path(Kind::adam, d, b);
        HostBuffer image(static_cast<std::size_t>(padded) * size);
        if (in_order) {
          read_verified(comm, file, job_for(dpath, file_type(d, b), size, total, share[static_cast<std::size_t>(rank)],
                                            image.data(), padded));
          agreed(comm, [&] {
            std::vector<int64_t> c(counts), o(displs);
            for (auto& x : c) x *= static_cast<int64_t>(size);
            for (auto& x : o) x *= static_cast<int64_t>(size);
            allgatherv_bytes(comm, image.data(), c, o);
          });
        } else {
          HostBuffer canon(static_cast<std::size_t>(total) * size);
          read_verified(comm, file, job_for(dpath, file_type(d, b), size, total, {{lo, lo, hi - lo}}, canon.data(), total));
          agreed(comm, [&] {
            std::vector<int64_t> c, o;
            for (int q = 0; q < world; ++q) {
              const auto [x, y] = even_share(total, q, world);
              o.push_back(x * static_cast<int64_t>(size));
              c.push_back((y - x) * static_cast<int64_t>(size));
            }
            allgatherv_bytes(comm, canon.data(), c, o);
          });
          for (std::size_t i = 0; i < planned.size(); ++i) {
            const ParamRecord& p = planned[i];
            if (p.kind != Kind::adam || p.dtype != d) continue;
            std::copy_n(canon.data() + fc.offset[i] * static_cast<int64_t>(size), p.numel * static_cast<int64_t>(size),
                        image.data() + p.offset * static_cast<int64_t>(size));
          }
        }
        (b == Buffer::param ? r.adam_param : b == Buffer::exp_avg ? r.adam_m : r.adam_v)[di] = std::move(image);
      }
    }
  }

  // Step counters: small, read whole by every rank, mapped by name.
  std::vector<int> file_adam_order;  // file's k-th Adam parameter -> registered id
  {
    std::map<std::string, int> id_of;
    for (std::size_t i = 0; i < params.size(); ++i) id_of[params[i].name] = static_cast<int>(i);
    for (const IndexRow& row : rows)
      if (row.kind == 1) file_adam_order.push_back(id_of.at(row.name));
  }
  r.adam_steps.assign(static_cast<std::size_t>(std::max(1, r.layout.num_adam_rows)), 0);
  if (!file_adam_order.empty()) {
    const int64_t n = static_cast<int64_t>(file_adam_order.size());
    std::vector<int64_t> steps(static_cast<std::size_t>(n));
    agreed(comm, [&] {
      const DatasetJob job = job_for(kAdamStepPath, H5T_STD_I64LE, 8, n, {{0, 0, n}}, steps.data(), n);
      const uint32_t stored = read_pieces(file.h5, job);
      require(crc32c(steps.data(), steps.size() * 8) == stored, kCorrupt, "the checksum of /adam/step does not match");
      for (int64_t k = 0; k < n; ++k) {
        require(steps[static_cast<std::size_t>(k)] >= 0, kCorrupt, "a step counter in /adam/step is negative");
        r.adam_steps[static_cast<std::size_t>(planned[static_cast<std::size_t>(file_adam_order[static_cast<std::size_t>(k)])].adam_row)] =
            steps[static_cast<std::size_t>(k)];
      }
    });
  }
  agreed(comm, [&] { h5_require(file.h5.close(), kCorrupt, "cannot close '" + path + "'"); });
  return r;
}

void commit(Optimizer& opt, Restored& r, const std::string& path, const std::string& fallback) {
  std::vector<int> current;
  for (const ParamRecord& p : opt.registry().all())
    if (p.kind == Kind::muon) current.push_back(p.owner);
  if (current != r.owners) opt.replan(r.owners);
  Backend& b = opt.backend();
  for (int di = 0; di < kNumDtypes; ++di) {
    const Dtype d = static_cast<Dtype>(di);
    const MuonBuffers& mb = opt.muon_buffers(d);
    if (!r.muon_param[di].empty()) {
      b.upload(mb.param, r.muon_param[di].data(), r.muon_param[di].size());
      b.upload(mb.momentum, r.muon_momentum[di].data(), r.muon_momentum[di].size());
    }
    const AdamBuffers& ab = opt.adam_buffers(d);
    if (!r.adam_param[di].empty()) {
      b.upload(ab.param, r.adam_param[di].data(), r.adam_param[di].size());
      b.upload(ab.exp_avg, r.adam_m[di].data(), r.adam_m[di].size());
      b.upload(ab.exp_avg_sq, r.adam_v[di].data(), r.adam_v[di].size());
    }
  }
  if (opt.layout().num_adam_rows > 0)
    b.upload(opt.adam_steps(), r.adam_steps.data(), static_cast<std::size_t>(opt.layout().num_adam_rows) * 8);
  StepStats stats;
  b.download(&stats, opt.stats(), sizeof stats);
  stats.steps_taken = r.meta.optimizer_step;
  b.upload(opt.stats(), &stats, sizeof stats);
  opt.set_options(r.options);

  auto& info = opt.restored_attributes;
  info = r.meta.user;
  const std::string p = kReservedPrefix;
  info[p + "file"] = path;
  info[p + "fallback"] = fallback;
  info[p + "plan"] = r.replayed ? "replayed" : "replanned";
  info[p + "saved_world_size"] = std::to_string(r.meta.world_size);
  info[p + "user_step"] = std::to_string(r.meta.user_step);
  info[p + "optimizer_step"] = std::to_string(r.meta.optimizer_step);
  info[p + "library_version"] = r.meta.library_version;
  info[p + "kernel_choices"] = r.meta.kernel_choices;
}

}  // namespace

int64_t restore_checkpoint(Optimizer& opt, const std::string& path_arg) {
  dmuon_context_s& ctx = *opt.context();
  MPI_Comm comm = ctx.comm;
  QuietHdf5 quiet;
  const std::string path = bcast_string(comm, path_arg);
  // Rank 0 decides what to try, in order; everyone tries the same files.
  std::vector<std::string> candidates;
  int directory = 0;
  if (ctx.rank == 0) {
    directory = is_directory(path) ? 1 : 0;
    if (!directory) {
      candidates.push_back(path);
    } else {
      const std::string latest = read_latest(path);
      if (!latest.empty() && path_exists(join_path(path, latest))) candidates.push_back(join_path(path, latest));
      for (const auto& [step, name] : list_checkpoints(path))
        if (name != latest) candidates.push_back(join_path(path, name));
    }
  }
  check_mpi(MPI_Bcast(&directory, 1, MPI_INT, 0, comm), "MPI_Bcast (restore)");
  candidates = bcast_strings(comm, candidates);
  agreed(comm, [&] {
    require(!candidates.empty(), DMUON_ERR_NOT_FOUND, "dmuon_checkpoint_restore: no checkpoint in '" + path + "'");
  });

  std::string skipped;
  int first_status = 0;
  for (const std::string& file : candidates) {
    try {
      Restored r = read_checkpoint(opt, file);
      agreed(comm, [&] { commit(opt, r, file, skipped); });
      return r.meta.user_step;
    } catch (const Error& e) {
      // Only damage falls back; a checkpoint of another model, or of a newer
      // format, is an answer the user must see.
      const bool damaged = e.status() == kCorrupt || e.status() == DMUON_ERR_NOT_FOUND || e.status() == DMUON_ERR_IO;
      const std::string what = e.what();
      if (!directory || !damaged)
        throw Error(e.status(), what.find(file) == std::string::npos ? file + ": " + what : what);
      if (!first_status) first_status = e.status();
      skipped += (skipped.empty() ? "" : "; ") + file + ": " + e.what();
    }
  }
  fail(first_status, "dmuon_checkpoint_restore: no checkpoint in '" + path + "' verifies: " + skipped);
}

}  // namespace dmuon::ckpt
