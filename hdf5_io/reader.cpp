// Restore, in five phases, each a function below:
//   open_verified   the file exists, its seal covers every byte HDF5 will
//                   parse, HDF5 and the seal agree where the data starts;
//   match           the metadata and the index verify and describe the
//                   registered model; the stored hyper-parameters are valid;
//   plan_restore    the plan the optimizer will have (the stored owners on
//                   the same world size, else a deterministic re-plan) and
//                   the reads (read_plan.hpp, a pure function);
//   stage           every buffer read into host staging and verified (each
//                   dataset's fletcher32 and CRC-32C), the other ranks'
//                   shares copied from the file or gathered;
//   commit          the staged contents placed into storage prepared for the
//                   plan, then installed by the one call that cannot fail.
// Every phase but commit leaves the optimizer untouched, and each ends with
// the same outcome on every rank (agreed()), so a damaged file is refused
// everywhere before anything changes.
#include <algorithm>
#include <cstdlib>
#include <future>
#include <map>
#include <system_error>

#include "atomic_files.hpp"
#include "collective.hpp"
#include "core/error.hpp"
#include "core/mapped_memory.hpp"
#include "core/options.hpp"
#include "crc32c.hpp"
#include "direct_chunks.hpp"
#include "file_seal.hpp"
#include "format.hpp"
#include "h5_util.hpp"
#include "hdf5_io/checkpoint.hpp"
#include "read_plan.hpp"
#include "transfer.hpp"

namespace dmuon::ckpt {
namespace {

constexpr int kCorrupt = DMUON_ERR_CHECKPOINT_CORRUPT;
constexpr int kMismatch = DMUON_ERR_CHECKPOINT_MISMATCH;

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

// A dataset opened for reading: its chunk map when every rank can read its
// chunks directly (else HDF5 reads it), and the stored CRC-32C.
struct OpenedRead {
  DatasetJob job;
  H5Id dset;
  uint32_t stored = 0;
  ChunkMap map;
  bool direct = false;
};

// Collective: open the dataset and agree on how it is read.
OpenedRead open_read(MPI_Comm comm, OpenFile& f, DatasetJob job) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  OpenedRead o;
  o.job = std::move(job);
  // Rank 0 alone looks every chunk up and sends the map: the chunk index is
  // read cold in small reads, and several ranks doing so at once are slower
  // than one (docs/decisions.md, "Measurements behind the code").
  int64_t head[4] = {0, 0, 0, 0};  // direct, chunk elements, chunk bytes, chunks
  agreed(comm, [&] {
    o.dset = open_for_read(f.h5, o.job, o.stored);
    if (rank == 0 && direct_chunk_map(o.dset, o.job, f.base, 0, 1, o.map))
      head[0] = 1, head[1] = o.map.chunk_elements, head[2] = o.map.chunk_bytes,
      head[3] = static_cast<int64_t>(o.map.address.size());
  });
  check_mpi(MPI_Bcast(head, 4, MPI_INT64_T, 0, comm), "MPI_Bcast (chunk layout)");
  o.direct = head[0] != 0;
  if (o.direct && world > 1) {
    o.map.chunk_elements = head[1];
    o.map.chunk_bytes = head[2];
    o.map.address.resize(static_cast<std::size_t>(head[3]));
    bcast_u64(comm, o.map.address.data(), o.map.address.size(), 0, "MPI_Bcast (chunk addresses)");
  }
  return o;
}

// Read this rank's pieces into o.job.host (its chunks directly when it can,
// else through HDF5) and verify every chunk's fletcher32 and the whole
// dataset's CRC collectively.
void read_verified(MPI_Comm comm, OpenFile& f, const OpenedRead& o, ReadAhead* ahead) {
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const DatasetJob& job = o.job;
  std::vector<CrcPiece> crcs;
  if (o.direct) {
    std::vector<Fletcher32Part> parts(o.map.address.size());
    std::vector<uint64_t> sums(o.map.address.size(), 0);
    agreed(comm, [&] { crcs = read_chunks(f.raw.fd(), f.path, job, o.map, parts.data(), sums.data(), rank, world, ahead); });
    sum_parts(comm, parts, &sums);
    agreed(comm, [&] {
      for (std::size_t k = 0; k < parts.size(); ++k)
        require(fletcher32_value(parts[k]) == sums[k], kCorrupt,
                "chunk " + std::to_string(k) + " of " + job.path + " fails its fletcher32 checksum");
    });
  } else {
    agreed(comm, [&] { read_with_hdf5(o.dset, job); });
    crcs = crc_pieces(job);
  }
  const uint32_t crc = combine_crc(comm, crcs, job.total * static_cast<int64_t>(job.elem));
  agreed(comm, [&] {
    require(crc == o.stored, kCorrupt, "the checksum of " + job.path + " does not match its data");
  });
}

// ------------------------------------------------------------ open and verify
// Guarantees: the file exists, every byte HDF5 will parse is as written (the
// seal), and `file.base` is where HDF5's addresses start.
void open_verified(MPI_Comm comm, int rank, const std::string& path, OpenFile& file) {
  agreed(comm, [&] {
    if (rank == 0) require(path_exists(path), DMUON_ERR_NOT_FOUND, "'" + path + "' does not exist");
  });
  // HDF5 parses only files whose every byte is as written (it can crash on damaged ones).
  const int64_t sealed_block = verify_seal(comm, path);
  file.path = path;
  agreed(comm, [&] {
    // Every rank opens the file on its own (HDF5's POSIX driver): a restore
    // only reads, each rank what it needs, so nothing needs MPI-IO.
    H5Id fapl = h5_plist(H5Pcreate(H5P_FILE_ACCESS), DMUON_ERR_IO, "cannot create a file access list");
    h5_require(H5Pset_fapl_sec2(fapl) >= 0, DMUON_ERR_IO, "cannot select HDF5's POSIX driver");
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
}

// ------------------------------------------------------------ match
// What the file says of the model, verified and matched to the registered
// parameters.
struct Matched {
  Metadata meta;
  dmuon_options_t options{};  // the caller's, with the stored ones applied; valid
  std::vector<IndexRow> rows;
  std::vector<const IndexRow*> row_of;  // per registered parameter
  Canonical file;                       // the file's offsets, by registered id
  std::vector<int> file_adam_order;     // the file's k-th Adam parameter -> registered id
  bool masters = false;                 // the master weights are read (reads_masters)
};

// Whether a restore reads master weights: the optimizer has them
// (options.master_weights) and the file too. A file written with the option
// has them for every bf16 buffer it holds; from one without, the masters
// start zeroed, so that the next step reads them from the restored parameters.
bool reads_masters(const StateAccess& state, const OpenFile& file, const Canonical& fc) {
  const auto bf = static_cast<std::size_t>(Dtype::bf16);
  if (!state.options().master_weights || (fc.muon_total[bf] == 0 && fc.adam_total[bf] == 0)) return false;
  const Kind k = fc.muon_total[bf] > 0 ? Kind::muon : Kind::adam;
  return H5Lexists(file.h5, dataset_path(k, Dtype::bf16, StateRole::master).c_str(), H5P_DEFAULT) > 0;
}

// Guarantees: the metadata and /index verify, the index is consistent and
// names exactly the registered parameters with the same kinds, dtypes and
// shapes, and the stored hyper-parameters are valid.
Matched match(MPI_Comm comm, const StateAccess& state, OpenFile& file) {
  const auto& params = state.params();
  Matched m;
  agreed(comm, [&] {
    m.meta = read_metadata(file.h5);
    {  // num_params sizes an allocation: it must match /index's length first (found by the structured fuzzer)
      H5Id ds = h5_dataset(H5Dopen2(file.h5, kIndexPath, H5P_DEFAULT), kCorrupt, "cannot open /index");
      H5Id space = h5_space(H5Dget_space(ds), kCorrupt, "cannot read the shape of /index");
      const hssize_t rows_in_file = H5Sget_simple_extent_npoints(space);
      require(rows_in_file == m.meta.num_params, kCorrupt,
              "the index has " + std::to_string(rows_in_file) + " rows, the file says " + std::to_string(m.meta.num_params));
    }
    std::vector<unsigned char> bytes(static_cast<std::size_t>(std::max<int64_t>(m.meta.num_params, 0)) * kIndexRowBytes);
    H5Id type = h5_type(index_file_type(), DMUON_ERR_IO, "cannot build the index type");
    const DatasetJob index = job_for(kIndexPath, type, kIndexRowBytes, m.meta.num_params,
                                     {{0, 0, m.meta.num_params}}, bytes.data(), m.meta.num_params);
    const uint32_t stored = read_pieces(file.h5, index);
    require(crc32c(bytes.data(), bytes.size()) == stored, kCorrupt, "the checksum of /index does not match");
    m.rows = unpack_index(bytes);
    Canonical totals;
    check_index_structure(m.rows, m.meta, totals);
    m.row_of = match_model(params, m.rows);
    m.options = state.options();
    apply_restored_options(m.options, m.meta.options);
    try {
      validate_options(m.options);
    } catch (const Error& e) {
      fail(kCorrupt, std::string("the stored hyper-parameters are invalid: ") + e.what());
    }
  });
  for (const IndexRow& row : m.rows)
    (row.kind == 0 ? m.file.muon_total : m.file.adam_total)[static_cast<std::size_t>(row.dtype)] += row.numel;
  std::map<std::string, int> id_of;
  for (std::size_t i = 0; i < params.size(); ++i) {
    m.file.offset.push_back(m.row_of[i]->offset);
    if (params[i].kind == Kind::adam) m.file.adam_params.push_back(static_cast<int>(i));
    id_of[params[i].name] = static_cast<int>(i);
  }
  for (const IndexRow& row : m.rows)
    if (row.kind == 1) m.file_adam_order.push_back(id_of.at(row.name));
  return m;
}

// ------------------------------------------------------------ plan
// Guarantees: the plan is valid for this world size (stored owners are
// checked to be ranks). Nothing is allocated yet.
Plan plan_restore(MPI_Comm comm, const StateAccess& state, const Matched& m) {
  const auto& params = state.params();
  const int world = state.world();
  Plan plan;
  agreed(comm, [&] {
    std::vector<int> owners;
    if (m.meta.world_size == world)
      for (std::size_t i = 0; i < params.size(); ++i)
        if (params[i].kind == Kind::muon) {
          const int o = m.row_of[i]->owner;
          require(o >= 0 && o < world, kCorrupt, "the stored owner of '" + params[i].name + "' is out of range");
          owners.push_back(o);
        }
    plan = make_plan(params, world, owners);
  });
  return plan;
}

// ------------------------------------------------------------ stage
// One buffer of the state, read, verified and complete in host memory.
struct StagedBuffer {
  DatasetRead read;
  HostBuffer data;  // read.image elements once staged
};

struct Staged {
  std::vector<StagedBuffer> buffers;
  std::vector<int64_t> adam_steps;  // per Adam row of the plan
};

// Helper threads per rank that populate the staging memory (the kernel
// zeroes it) ahead of the reads.
constexpr std::size_t kStagingThreads = 2;

// The rest of a replicated dataset from the other ranks.
void gather(MPI_Comm comm, StagedBuffer& s) {
  const DatasetRead& r = s.read;
  agreed(comm, [&] {
    if (r.completion == Completion::segments) {
      int world = 1;
      MPI_Comm_size(comm, &world);
      allgather_segments(comm, s.data.data(), static_cast<std::size_t>(r.staging / world) * r.element_size);
      return;
    }
    std::vector<int64_t> c(r.counts), o(r.displs);
    for (auto& x : c) x *= static_cast<int64_t>(r.element_size);
    for (auto& x : o) x *= static_cast<int64_t>(r.element_size);
    allgatherv_bytes(comm, s.data.data(), c, o);
  });
}

// A canonical staging buffer becomes the padded image.
void place_canonical(MPI_Comm comm, StagedBuffer& s) {
  agreed(comm, [&] {
    const auto es = static_cast<int64_t>(s.read.element_size);
    HostBuffer image(static_cast<std::size_t>(s.read.image) * s.read.element_size);
    for (const Piece& p : s.read.placement)
      std::copy_n(s.data.data() + p.file * es, p.count * es, image.data() + p.mem * es);
    s.data = std::move(image);
  });
}

// Guarantees: every buffer of the plan's state is in host memory, verified
// against the file's checksums, and the step counters are read; the
// optimizer is untouched.
Staged stage(const StateAccess& state, OpenFile& file, const Plan& plan, const Matched& m,
             std::vector<DatasetRead> reads) {
  MPI_Comm comm = state.comm();
  Staged staged;
  staged.buffers.resize(reads.size());
  for (std::size_t i = 0; i < reads.size(); ++i) staged.buffers[i].read = std::move(reads[i]);
  // All staging is mapped now and populated by kStagingThreads helpers, in
  // read order, while the datasets are opened and read (the kernel zeroes
  // pages about as fast as a disk delivers them: docs/decisions.md,
  // "Measurements behind the code"). A read that overtakes the helpers takes its pages itself,
  // without waiting. The helpers' futures are declared after the staging,
  // so an error waits for them before the staging is unmapped.
  std::vector<std::pair<char*, std::size_t>> spans;
  agreed(comm, [&] {
    for (StagedBuffer& s : staged.buffers) {
      s.data = HostBuffer(static_cast<std::size_t>(s.read.staging) * s.read.element_size);
      spans.emplace_back(s.data.data(), s.data.size());
    }
  });
  const auto populate_every = [&spans](std::size_t first, std::size_t step) {
    // Out of memory: the reads meet it as they touch the pages.
    for (std::size_t i = first; i < spans.size(); i += step) (void)populate(spans[i].first, spans[i].second);
  };
  // A replicated dataset is verified by every rank for its own share, as
  // read; the rest every rank then copies from the file itself when all
  // ranks share one node, and so one page cache holding what the others have
  // just read and verified. Across nodes that would read the data once per
  // node from the file system: all-gather there. options.restore_gather = 1
  // asks for the all-gather everywhere.
  const bool replicated_from_file = all_ranks(comm, ranks_share_node(comm) && state.options().restore_gather == 0);
  std::vector<std::future<void>> populators;
  for (std::size_t t = 0; t < kStagingThreads; ++t) {
    try {
      populators.push_back(std::async(std::launch::async, populate_every, t, kStagingThreads));
    } catch (const std::system_error&) {  // no thread to be had: the reads take the pages
    }
  }
  // Each dataset's chunks are handed to the read-ahead as soon as they are
  // located, so the disk streams the first ones while the chunk indexes of
  // the others are still being read (cold, in small reads).
  std::vector<OpenedRead> opened;
  ReadAhead ahead(file.raw.fd(), kRestoreReadAheadBytes);
  for (StagedBuffer& s : staged.buffers) {
    const DatasetRead& r = s.read;
    opened.push_back(open_read(comm, file,
                               job_for(dataset_path(r.kind, r.dtype, r.role), file_type(r.dtype, r.role),
                                       r.element_size, r.total, r.own, s.data.data(), r.staging)));
    if (opened.back().direct) add_read_ranges(opened.back().job, opened.back().map, ahead);
    ahead.advance(0);
  }
  // The copies from the page cache run on helper threads, beside the reads
  // of the next datasets; declared after the staging and `opened` they use,
  // so an error waits for them.
  std::vector<std::future<void>> copies;
  for (std::size_t i = 0; i < staged.buffers.size(); ++i) {
    StagedBuffer& s = staged.buffers[i];
    read_verified(comm, file, opened[i], &ahead);
    if (s.read.completion != Completion::none) {
      if (replicated_from_file && opened[i].direct) {
        DatasetJob rest = opened[i].job;
        rest.pieces = s.read.others;
        const auto copy = [&file, &map = opened[i].map, rest = std::move(rest)] {
          copy_chunks(file.raw.fd(), file.path, rest, map);
        };
        if (s.read.completion == Completion::canonical) {  // placed next: it needs the whole buffer now
          agreed(comm, copy);
        } else {
          try {
            copies.push_back(std::async(std::launch::async, copy));
          } catch (const std::system_error&) {  // no thread to be had: copied at get(), below
            copies.push_back(std::async(std::launch::deferred, copy));
          }
        }
      } else {
        gather(comm, s);
      }
    }
    if (s.read.completion == Completion::canonical) place_canonical(comm, s);
    opened[i].dset.close();
  }
  agreed(comm, [&] {
    for (auto& c : copies) c.get();
  });

  // Step counters: small, read whole by every rank, mapped by name.
  staged.adam_steps.assign(static_cast<std::size_t>(std::max(1, plan.layout.num_adam_rows)), 0);
  if (!m.file_adam_order.empty()) {
    const int64_t n = static_cast<int64_t>(m.file_adam_order.size());
    std::vector<int64_t> steps(static_cast<std::size_t>(n));
    agreed(comm, [&] {
      const DatasetJob job = job_for(kAdamStepPath, H5T_STD_I64LE, 8, n, {{0, 0, n}}, steps.data(), n);
      const uint32_t stored = read_pieces(file.h5, job);
      require(crc32c(steps.data(), steps.size() * 8) == stored, kCorrupt, "the checksum of /adam/step does not match");
      for (int64_t k = 0; k < n; ++k) {
        const auto id = static_cast<std::size_t>(m.file_adam_order[static_cast<std::size_t>(k)]);
        require(steps[static_cast<std::size_t>(k)] >= 0, kCorrupt, "a step counter in /adam/step is negative");
        staged.adam_steps[static_cast<std::size_t>(plan.params[id].adam_row)] = steps[static_cast<std::size_t>(k)];
      }
    });
  }
  agreed(comm, [&] { h5_require(file.h5.close(), kCorrupt, "cannot close '" + file.path + "'"); });
  return staged;
}

// ------------------------------------------------------------ commit
// In two parts. place: the staged contents, the step counters and the
// settings go into storage for the plan: the optimizer's own when the plan
// is its own (the same addresses, so views stay valid), else new storage,
// whose allocation may fail and then leaves the optimizer as it was. Then,
// once every rank has placed, install: the optimizer takes the plan, the
// storage and the settings, a call that cannot fail.
struct Placed {
  RestoreTarget target;
  RestoredSettings settings;
};

Placed place(StateAccess& state, Plan plan, const Matched& m, Staged& staged, const std::string& path,
             const std::string& fallback) {
  const bool replayed = m.meta.world_size == state.world();
  // A staged block of its buffer's exact size on a host backend moves its
  // pages (move_pages_into), anything else is copied.
  RestoreTarget target = state.prepare(std::move(plan));
  if (!m.masters)
    for (const StateBuffer& b : target.buffers)
      if (b.role == StateRole::master) state.zero(b.data, static_cast<std::size_t>(b.elements) * b.element_size);
  for (StagedBuffer& s : staged.buffers) {
    const auto to = std::find_if(target.buffers.begin(), target.buffers.end(), [&](const StateBuffer& b) {
      return b.role == s.read.role && b.kind == s.read.kind && b.dtype == s.read.dtype;
    });
    if (to == target.buffers.end() || s.data.empty()) continue;
    const std::size_t bytes = static_cast<std::size_t>(to->elements) * to->element_size;
    if (s.data.size() == bytes && state.move_pages_into(to->data, s.data.data(), bytes))
      (void)s.data.release();
    else
      state.upload(to->data, s.data.data(), s.data.size());
  }
  if (target.plan.layout.num_adam_rows > 0)
    state.upload(target.adam_steps, staged.adam_steps.data(),
                 static_cast<std::size_t>(target.plan.layout.num_adam_rows) * 8);
  state.place_step_count(target, m.meta.optimizer_step);

  RestoredSettings settings;
  settings.options = m.options;
  settings.has_lr_schedules = m.meta.has_lr_schedules;
  settings.lr_schedules = m.meta.lr_schedules;
  auto& info = settings.attributes;
  info = m.meta.user;
  const std::string p = kReservedPrefix;
  info[p + "file"] = path;
  info[p + "fallback"] = fallback;
  info[p + "plan"] = replayed ? "replayed" : "replanned";
  info[p + "saved_world_size"] = std::to_string(m.meta.world_size);
  info[p + "user_step"] = std::to_string(m.meta.user_step);
  info[p + "optimizer_step"] = std::to_string(m.meta.optimizer_step);
  info[p + "library_version"] = m.meta.library_version;
  info[p + "kernel_choices"] = m.meta.kernel_choices;
  return Placed{std::move(target), std::move(settings)};
}

// One candidate file, all five phases; returns the user step.
int64_t restore_from(StateAccess& state, const std::string& path, const std::string& fallback) {
  MPI_Comm comm = state.comm();
  OpenFile file;
  open_verified(comm, state.rank(), path, file);
  Matched m = match(comm, state, file);
  m.masters = reads_masters(state, file, m.file);
  Plan plan = plan_restore(comm, state, m);
  Staged staged = stage(state, file, plan, m, plan_reads(plan, m.file, state.rank(), m.masters));
  Placed placed;
  agreed(comm, [&] { placed = place(state, std::move(plan), m, staged, path, fallback); });
  const bool moved = placed.target.moved;
  state.install(std::move(placed.target), std::move(placed.settings));
  if (moved) state.tell_storage_moved();
  if (!fallback.empty())
    state.message(DMUON_MESSAGE_WARNING, "dmuon_checkpoint_restore: restored the older checkpoint " + path +
                                             " after refusing newer ones: " + fallback);
  return m.meta.user_step;
}

}  // namespace

int64_t restore_checkpoint(StateAccess& state, const std::string& path_arg) {
  MPI_Comm comm = state.comm();
  QuietHdf5 quiet;
  const std::string path = bcast_string(comm, path_arg);
  // Rank 0 decides what to try, in order; everyone tries the same files.
  std::vector<std::string> candidates;
  std::string skipped;  // what was passed over, for dmuon.fallback
  int directory = 0;
  if (state.rank() == 0) {
    directory = is_directory(path) ? 1 : 0;
    if (!directory) {
      candidates.push_back(path);
    } else {
      const std::string latest = read_latest(path);
      if (!latest.empty() && path_exists(join_path(path, latest)))
        candidates.push_back(join_path(path, latest));
      else if (!latest.empty())
        skipped = join_path(path, kLatestName) + " names '" + latest + "', which does not exist";
      for (const auto& [step, name] : list_checkpoints(path))
        if (name != latest) candidates.push_back(join_path(path, name));
    }
  }
  check_mpi(MPI_Bcast(&directory, 1, MPI_INT, 0, comm), "MPI_Bcast (restore)");
  candidates = bcast_strings(comm, candidates);
  skipped = bcast_string(comm, skipped);
  agreed(comm, [&] {
    require(!candidates.empty(), DMUON_ERR_NOT_FOUND, "dmuon_checkpoint_restore: no checkpoint in '" + path + "'");
  });

  int first_status = 0;
  for (const std::string& file : candidates) {
    try {
      return restore_from(state, file, skipped);
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
