// Restore: read and verify everything into host staging first (index against
// the registered model, every dataset's fletcher32 and CRC-32C, the metadata
// checksum), agree on the outcome across ranks, and only then replace the
// optimizer's state. Each rank reads its own Muon matrices (under the plan it
// will use) and an even share of the Adam buffers, and verifies them; the
// other ranks' shares it then copies from the file when all ranks share one
// node (one page cache), else all-gathers.
#include <algorithm>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <system_error>
#include <map>

#include "atomic_files.hpp"
#include "checkpoint.hpp"
#include "collective.hpp"
#include "core/error.hpp"
#include "core/mapped_memory.hpp"
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
  // Master weights, read when the optimizer has them and the file too
  // (empty otherwise: the commit zeroes the masters, re-read from the
  // parameters at the next step).
  std::array<HostBuffer, kNumDtypes> muon_master;  // this rank's segment
  std::array<HostBuffer, kNumDtypes> adam_master;  // full padded buffers
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

void append(std::vector<Piece>& to, const std::vector<Piece>& from) { to.insert(to.end(), from.begin(), from.end()); }

std::vector<Piece> in_file_order(std::vector<Piece> pieces) {
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.file < b.file; });
  return merge_pieces(std::move(pieces));
}

DatasetJob job_for(const std::string& path, hid_t type, std::size_t elem, int64_t total, std::vector<Piece> pieces,
                   void* host, int64_t host_elements) {
  DatasetJob j;
  j.path = path;
  j.file_type = type;
  j.elem = elem;
  j.total = total;
  j.pieces = in_file_order(std::move(pieces));
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
  // read cold in small reads, and four ranks doing so at once took 0.12-0.17 s
  // for five datasets on the GPU machine's host, against 0.04 s for one.
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

// One data dataset of a restore: how its staging is mapped (at once; helper
// threads populate it while the reads run); for a dataset every rank holds
// whole, the other ranks' pieces and the all-gather that brings them
// instead; and what completes the buffer afterwards.
struct DataRead {
  DatasetJob job;  // host set from allocate()
  std::function<char*()> allocate;
  std::vector<Piece> others;     // in file order, in job.host's coordinates
  std::function<void()> gather;  // null: the dataset is not replicated
  std::function<void()> place;   // null: nothing to do
};

// Helper threads per rank that populate the staging memory (the kernel
// zeroes it) ahead of the reads.
constexpr std::size_t kStagingThreads = 2;

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
    // Every rank opens the file on its own (HDF5's POSIX driver): a restore
    // only reads, each rank what it needs, so nothing needs MPI-IO. (On the
    // GPU machine's host, opening the five data datasets at 4 ranks took
    // 0.12 s this way and 0.15 s through MPI-IO, one run each.)
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

  // Every data dataset first (nothing read yet), so the read-ahead can run
  // across datasets; then each is read, verified and completed.
  std::vector<DataRead> reads;
  std::deque<HostBuffer> canonical;  // staging of out-of-order Adam shares, freed when moved
  for (int di = 0; di < kNumDtypes; ++di) {
    const Dtype d = static_cast<Dtype>(di);
    const std::size_t es = dtype_size(d);
    const int64_t seg = r.layout.muon[static_cast<std::size_t>(di)].segment_elements;
    // Masters are read when both sides have them (a file written with the
    // option has them for every bf16 buffer it holds).
    const bool masters = opt.has_masters(d) && (fc.muon_total[di] > 0 || fc.adam_total[di] > 0) &&
                         H5Lexists(file.h5, dataset_path(fc.muon_total[di] > 0 ? Kind::muon : Kind::adam, d,
                                                         Buffer::master).c_str(), H5P_DEFAULT) > 0;
    if (fc.muon_total[di] > 0) {
      HostBuffer* param = &r.muon_param[di];
      HostBuffer* momentum = &r.muon_momentum[di];
      std::vector<Piece> others;
      for (int q = 0; q < world; ++q)
        if (q != rank) append(others, muon_pieces(planned, fc, d, q, seg, false));
      reads.push_back({job_for(dataset_path(Kind::muon, d, Buffer::param), file_type(d, Buffer::param), es,
                               fc.muon_total[di], muon_pieces(planned, fc, d, rank, seg, false), nullptr, seg * world),
                       [=] { return (*param = HostBuffer(static_cast<std::size_t>(seg * world) * es)).data(); },
                       in_file_order(std::move(others)),
                       [=] { agreed(comm, [&] { allgather_segments(comm, param->data(), static_cast<std::size_t>(seg) * es); }); },
                       nullptr});
      reads.push_back({job_for(dataset_path(Kind::muon, d, Buffer::momentum), file_type(d, Buffer::momentum), 4,
                               fc.muon_total[di], muon_pieces(planned, fc, d, rank, seg, true), nullptr, seg),
                       [=] { return (*momentum = HostBuffer(static_cast<std::size_t>(seg) * 4)).data(); },
                       {}, nullptr, nullptr});
      if (masters) {
        HostBuffer* master = &r.muon_master[di];
        reads.push_back({job_for(dataset_path(Kind::muon, d, Buffer::master), file_type(d, Buffer::master), 4,
                                 fc.muon_total[di], muon_pieces(planned, fc, d, rank, seg, true), nullptr, seg),
                         [=] { return (*master = HostBuffer(static_cast<std::size_t>(seg) * 4)).data(); },
                         {}, nullptr, nullptr});
      }
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
      std::vector<std::pair<Buffer, std::size_t>> bufs = {{Buffer::param, es}, {Buffer::exp_avg, 4}, {Buffer::exp_avg_sq, 4}};
      if (masters) bufs.emplace_back(Buffer::master, 4);
      for (const auto& entry : bufs) {
        // Plain variables, not a structured binding: C++17 lets no lambda capture one.
        const Buffer b = entry.first;
        const std::size_t size = entry.second;
        const std::string dpath = dataset_path(Kind::adam, d, b);
        HostBuffer* image = &(b == Buffer::param     ? r.adam_param
                              : b == Buffer::exp_avg ? r.adam_m
                              : b == Buffer::master  ? r.adam_master
                                                     : r.adam_v)[di];
        const auto allocate_image = [=] { return (*image = HostBuffer(static_cast<std::size_t>(padded) * size)).data(); };
        if (in_order) {
          std::vector<Piece> others;
          for (int q = 0; q < world; ++q)
            if (q != rank) append(others, share[static_cast<std::size_t>(q)]);
          reads.push_back({job_for(dpath, file_type(d, b), size, total, share[static_cast<std::size_t>(rank)], nullptr, padded),
                           allocate_image, in_file_order(std::move(others)), [=] {
                             agreed(comm, [&] {
                               std::vector<int64_t> c(counts), o(displs);
                               for (auto& x : c) x *= static_cast<int64_t>(size);
                               for (auto& x : o) x *= static_cast<int64_t>(size);
                               allgatherv_bytes(comm, image->data(), c, o);
                             });
                           },
                           nullptr});
        } else {
          canonical.emplace_back();
          HostBuffer* canon = &canonical.back();
          std::vector<Piece> others;
          for (int q = 0; q < world; ++q) {
            const auto [x, y] = even_share(total, q, world);
            if (q != rank) others.push_back({x, x, y - x});
          }
          reads.push_back({job_for(dpath, file_type(d, b), size, total, {{lo, lo, hi - lo}}, nullptr, total),
                           [=] { return (*canon = HostBuffer(static_cast<std::size_t>(total) * size)).data(); },
                           in_file_order(std::move(others)),
                           [=] {
                             agreed(comm, [&] {
                               std::vector<int64_t> c, o;
                               for (int q = 0; q < world; ++q) {
                                 const auto [x, y] = even_share(total, q, world);
                                 o.push_back(x * static_cast<int64_t>(size));
                                 c.push_back((y - x) * static_cast<int64_t>(size));
                               }
                               allgatherv_bytes(comm, canon->data(), c, o);
                             });
                           },
                           [=, &planned, &fc] {
                             agreed(comm, [&] {
                               allocate_image();
                               for (std::size_t i = 0; i < planned.size(); ++i) {
                                 const ParamRecord& p = planned[i];
                                 if (p.kind != Kind::adam || p.dtype != d) continue;
                                 std::copy_n(canon->data() + fc.offset[i] * static_cast<int64_t>(size),
                                             p.numel * static_cast<int64_t>(size),
                                             image->data() + p.offset * static_cast<int64_t>(size));
                               }
                               *canon = HostBuffer();
                             });
                           }});
        }
      }
    }
  }
  // This rank's own datasets (the Muon momentum) last: the copies (or
  // all-gathers) that complete the replicated ones then run beside its read,
  // not after everything is read. (The last copy took 0.025-0.03 s of a
  // 0.7 s restore at 2 ranks, 1 GB on the GPU machine's host; measured
  // side by side, momentum last: restore 0.49-0.75 s at 4 ranks, median 0.58,
  // first: 0.64-0.72 s, median 0.68; at 2 ranks no difference.)
  std::stable_partition(reads.begin(), reads.end(), [](const DataRead& dr) { return dr.gather != nullptr; });
  // All staging is mapped now and populated by kStagingThreads helpers, in
  // read order, while the datasets are opened and read: the kernel zeroes
  // pages at about 3 GB/s per thread on the GPU machine's host (a VM), as
  // long as reading them from its disk. A read that overtakes the helpers
  // takes its pages itself, without waiting (waiting for the whole first
  // block took 0.1-0.22 s). The helpers' futures are declared after `r`, so
  // an error waits for them before the staging is unmapped.
  std::vector<std::pair<char*, std::size_t>> spans;
  agreed(comm, [&] {
    for (DataRead& dr : reads) {
      dr.job.host = dr.allocate();
      spans.emplace_back(dr.job.host, static_cast<std::size_t>(dr.job.host_elements) * dr.job.elem);
    }
  });
  const auto populate_every = [&spans](std::size_t first, std::size_t step) {
    // Out of memory: the reads meet it as they touch the pages.
    for (std::size_t i = first; i < spans.size(); i += step) (void)populate(spans[i].first, spans[i].second);
  };
  // A replicated dataset is verified by every rank for its own share, as
  // read; the rest every rank then copies from the file itself when all
  // ranks share one node, and so one page cache holding what the others have
  // just read and verified (on the GPU machine's host, the all-gathers took
  // 0.19 s of a 0.8 s restore at 4 ranks). Across nodes that would read the
  // data once per node from the file system: all-gather there.
  // options.restore_gather = 1 asks for the all-gather everywhere.
  const bool replicated_from_file =
      all_ranks(comm, ranks_share_node(comm) && opt.options().restore_gather == 0);
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
  for (DataRead& dr : reads) {
    opened.push_back(open_read(comm, file, std::move(dr.job)));
    if (opened.back().direct) add_read_ranges(opened.back().job, opened.back().map, ahead);
    ahead.advance(0);
  }
  // The copies from the page cache run on helper threads, beside the reads
  // of the next datasets (they took 0.12-0.18 s of a 0.7-0.8 s restore at 2-4
  // ranks when the reads waited for them); declared after the staging and
  // `opened` they use, so an error waits for them.
  std::vector<std::future<void>> copies;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    read_verified(comm, file, opened[i], &ahead);
    if (reads[i].gather) {
      if (replicated_from_file && opened[i].direct) {
        DatasetJob rest = opened[i].job;
        rest.pieces = reads[i].others;
        const auto copy = [&file, &map = opened[i].map, rest = std::move(rest)] {
          copy_chunks(file.raw.fd(), file.path, rest, map);
        };
        if (reads[i].place) {  // it needs the whole buffer now
          agreed(comm, copy);
        } else {
          try {
            copies.push_back(std::async(std::launch::async, copy));
          } catch (const std::system_error&) {  // no thread to be had: copied at get(), below
            copies.push_back(std::async(std::launch::deferred, copy));
          }
        }
      } else {
        reads[i].gather();
      }
    }
    if (reads[i].place) reads[i].place();
    opened[i].dset.close();
  }
  agreed(comm, [&] {
    for (auto& c : copies) c.get();
  });

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
  // Into the storage the optimizer has (after a re-plan, its new storage), at
  // the same addresses, so that the views stay valid on the same plan: a
  // staged block of its buffer's exact size on a host backend by moving its
  // pages (Backend::move_pages_into), anything else by a copy.
  const auto place = [&b](void* dst, HostBuffer& staged, std::size_t bytes) {
    if (staged.empty()) return;
    if (staged.size() == bytes && b.move_pages_into(dst, staged.data(), bytes))
      (void)staged.release();
    else
      b.upload(dst, staged.data(), staged.size());
  };
  for (int di = 0; di < kNumDtypes; ++di) {
    const Dtype d = static_cast<Dtype>(di);
    const std::size_t es = dtype_size(d);
    const MuonBuffers& mb = opt.muon_buffers(d);
    const AdamBuffers& ab = opt.adam_buffers(d);
    const auto nm = static_cast<std::size_t>(opt.layout().muon[static_cast<std::size_t>(di)].total_elements());
    const auto na = static_cast<std::size_t>(ab.elements);
    place(mb.param, r.muon_param[di], nm * es);
    place(ab.param, r.adam_param[di], na * es);
    place(mb.momentum, r.muon_momentum[di], static_cast<std::size_t>(mb.segment_elements) * 4);
    place(ab.exp_avg, r.adam_m[di], na * 4);
    place(ab.exp_avg_sq, r.adam_v[di], na * 4);
    // Masters: from the file, or zeroed (read from the restored parameters
    // at the next step) when it has none.
    if (mb.master && r.muon_master[di].empty()) b.zero(mb.master, static_cast<std::size_t>(mb.segment_elements) * 4);
    if (ab.master && r.adam_master[di].empty()) b.zero(ab.master, na * 4);
    place(mb.master, r.muon_master[di], static_cast<std::size_t>(mb.segment_elements) * 4);
    place(ab.master, r.adam_master[di], na * 4);
  }
  if (opt.layout().num_adam_rows > 0)
    b.upload(opt.adam_steps(), r.adam_steps.data(), static_cast<std::size_t>(opt.layout().num_adam_rows) * 8);
  StepStats stats;
  b.download(&stats, opt.stats(), sizeof stats);
  stats.steps_taken = r.meta.optimizer_step;
  b.upload(opt.stats(), &stats, sizeof stats);
  opt.set_options(r.options);
  if (r.meta.has_lr_schedules) opt.install_lr_schedules(r.meta.lr_schedules);

  auto& info = opt.restored_attributes;
  info = r.meta.user;
  const std::string p = kReservedPrefix;
  info[p + "file"] = path;
  info[p + "fallback"] = fallback;
  if (!fallback.empty())
    b.message(DMUON_MESSAGE_WARNING, "dmuon_checkpoint_restore: restored the older checkpoint " + path +
                                         " after refusing newer ones: " + fallback);
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
  std::string skipped;  // what was passed over, for dmuon.fallback
  int directory = 0;
  if (ctx.rank == 0) {
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
