#include "direct_chunks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <mutex>

#include "collective.hpp"
#include "core/error.hpp"
#include "crc32c.hpp"
#include "format.hpp"
#include "h5_compat.hpp"

// HDF5 1.13 moved the file driver interface out of hdf5.h.
#if __has_include(<H5FDdevelop.h>)
#include <H5FDdevelop.h>
#endif

namespace dmuon::ckpt {

// ------------------------------------------------------------ skeleton driver
namespace {

// Raw-data writes are dropped while this is set (rank 0 only builds one
// skeleton at a time: the save is collective and HDF5 1.10 is not thread-safe).
bool g_drop_raw = false;

struct SkeletonFile {
  H5FD_t pub;  // first: HDF5 casts between the two
  int fd = -1;
  haddr_t eoa = 0;
  haddr_t eof = 0;
};

constexpr haddr_t kMaxAddr = (haddr_t{1} << 62) - 1;

H5FD_t* sk_open(const char* name, unsigned flags, hid_t, haddr_t maxaddr) {
  if (!name || !*name || maxaddr == 0 || maxaddr == HADDR_UNDEF || maxaddr > kMaxAddr) return nullptr;
  int o = (flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY;
  if (flags & H5F_ACC_TRUNC) o |= O_TRUNC;
  if (flags & H5F_ACC_CREAT) o |= O_CREAT;
  if (flags & H5F_ACC_EXCL) o |= O_EXCL;
  const int fd = ::open(name, o | O_CLOEXEC, 0666);
  if (fd < 0) return nullptr;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return nullptr;
  }
  auto* f = new (std::nothrow) SkeletonFile();
  if (!f) {
    ::close(fd);
    return nullptr;
  }
  f->fd = fd;
  f->eof = static_cast<haddr_t>(st.st_size);
  return &f->pub;
}

herr_t sk_close(H5FD_t* file) {
  auto* f = reinterpret_cast<SkeletonFile*>(file);
  const int rc = ::close(f->fd);
  delete f;
  return rc == 0 ? 0 : -1;
}

herr_t sk_query(const H5FD_t*, unsigned long* flags) {
  // What the sec2 driver declares: metadata and small raw data are
  // aggregated and accumulated, contiguous data sieved.
  if (flags)
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t sk_get_eoa(const H5FD_t* file, H5FD_mem_t) { return reinterpret_cast<const SkeletonFile*>(file)->eoa; }
herr_t sk_set_eoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
  reinterpret_cast<SkeletonFile*>(file)->eoa = addr;
  return 0;
}
haddr_t sk_get_eof(const H5FD_t* file, H5FD_mem_t) { return reinterpret_cast<const SkeletonFile*>(file)->eof; }

herr_t sk_read(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buf) {
  auto* f = reinterpret_cast<SkeletonFile*>(file);
  auto* p = static_cast<unsigned char*>(buf);
  while (size > 0) {
    const ssize_t n = ::pread(f->fd, p, size, static_cast<off_t>(addr));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) {  // past the end of the file: zeros, as in the sec2 driver
      std::memset(p, 0, size);
      return 0;
    }
    p += n;
    addr += static_cast<haddr_t>(n);
    size -= static_cast<size_t>(n);
  }
  return 0;
}

herr_t sk_write(H5FD_t* file, H5FD_mem_t type, hid_t, haddr_t addr, size_t size, const void* buf) {
  auto* f = reinterpret_cast<SkeletonFile*>(file);
  // The fill chunks of the data datasets: the file's length (set at close
  // from the end of allocation) leaves them as holes that read as zeros.
  if (g_drop_raw && type == H5FD_MEM_DRAW) return 0;
  const auto* p = static_cast<const unsigned char*>(buf);
  const haddr_t end = addr + size;
  while (size > 0) {
    const ssize_t n = ::pwrite(f->fd, p, size, static_cast<off_t>(addr));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    addr += static_cast<haddr_t>(n);
    size -= static_cast<size_t>(n);
  }
  f->eof = std::max(f->eof, end);
  return 0;
}

herr_t sk_truncate(H5FD_t* file, hid_t, hbool_t) {
  auto* f = reinterpret_cast<SkeletonFile*>(file);
  if (f->eoa == f->eof) return 0;
  if (::ftruncate(f->fd, static_cast<off_t>(f->eoa)) != 0) return -1;
  f->eof = f->eoa;
  return 0;
}

// HDF5 numbers third-party drivers from H5_VFD_RESERVED (256) up; 256-511
// are for drivers that are never stored in a file, as this one is not.
constexpr int kSkeletonDriverValue = 256 + 77;

// Filled by member name, not position: HDF5 1.13.2 put `version` and `value`
// first and added vector and selection I/O, `del` and `ctl` (all left unset:
// HDF5 then falls back to read and write).
H5FD_class_t skeleton_class() {
  H5FD_class_t c{};
#if H5_VERSION_GE(1, 13, 2)
  c.version = H5FD_CLASS_VERSION;
  c.value = static_cast<H5FD_class_value_t>(kSkeletonDriverValue);
#endif
  c.name = "dmuon_skeleton";
  c.maxaddr = kMaxAddr;
  c.fc_degree = H5F_CLOSE_WEAK;
  // No superblock, fapl or dxpl information; HDF5's own alloc and free; no
  // flush (every rank fsyncs the finished file), no lock (the .tmp name is
  // this save's alone).
  c.open = sk_open;
  c.close = sk_close;
  c.query = sk_query;
  c.get_eoa = sk_get_eoa;
  c.set_eoa = sk_set_eoa;
  c.get_eof = sk_get_eof;
  c.read = sk_read;
  c.write = sk_write;
  c.truncate = sk_truncate;
  const H5FD_mem_t map[H5FD_MEM_NTYPES] = H5FD_FLMAP_DICHOTOMY;
  std::copy(std::begin(map), std::end(map), std::begin(c.fl_map));
  return c;
}

hid_t skeleton_driver() {
  // Registered once; registered again if the application closed the HDF5 library.
  static std::mutex m;
  static hid_t id = H5I_INVALID_HID;
  std::lock_guard<std::mutex> lock(m);
  static const H5FD_class_t cls = skeleton_class();
  if (id < 0 || H5Iis_valid(id) <= 0) id = H5FDregister(&cls);
  return id;
}

}  // namespace

H5Id skeleton_fapl() {
  const hid_t driver = skeleton_driver();
  h5_require(driver >= 0, DMUON_ERR_IO, "cannot register the checkpoint file driver");
  H5Id fapl = h5_plist(H5Pcreate(H5P_FILE_ACCESS), DMUON_ERR_IO, "cannot create a file access list");
  h5_require(H5Pset_driver(fapl, driver, nullptr) >= 0, DMUON_ERR_IO, "cannot select the checkpoint file driver");
  return fapl;
}

RawWriteGate::RawWriteGate() { g_drop_raw = true; }
RawWriteGate::~RawWriteGate() { g_drop_raw = false; }

// ------------------------------------------------------------ save
ChunkMap create_skeleton_dataset(hid_t file, const DatasetJob& job, uint32_t crc, uint64_t base) {
  const std::string what = "cannot create " + job.path;
  ChunkMap map;
  map.chunk_elements = chunk_elements_of(job);
  map.chunk_bytes = map.chunk_elements * static_cast<int64_t>(job.elem);
  const hsize_t dims[1] = {static_cast<hsize_t>(job.total)};
  H5Id fspace = h5_space(H5Screate_simple(1, dims, nullptr), DMUON_ERR_IO, what);
  H5Id dcpl = h5_plist(H5Pcreate(H5P_DATASET_CREATE), DMUON_ERR_IO, what);
  const hsize_t chunk[1] = {static_cast<hsize_t>(map.chunk_elements)};
  h5_require(H5Pset_chunk(dcpl, 1, chunk) >= 0, DMUON_ERR_IO, what);
  h5_require(H5Pset_fletcher32(dcpl) >= 0, DMUON_ERR_IO, what);
  // Early: every chunk gets its place now (the fill writes are dropped).
  h5_require(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0, DMUON_ERR_IO, what);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_obj_track_times(dcpl, 0);  // the same state gives the same file bytes
  H5Id lcpl = h5_plist(H5Pcreate(H5P_LINK_CREATE), DMUON_ERR_IO, what);
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id dset;
  {
    RawWriteGate gate;
    dset = h5_dataset(H5Dcreate2(file, job.path.c_str(), job.file_type, fspace, lcpl, dcpl, H5P_DEFAULT),
                      DMUON_ERR_IO, what);
  }
  write_attr_u32(dset, kCrcAttr, crc);
  write_attr_str(dset, "element_type", job.element_type);
  const int64_t n = chunk_count(job.total, map.chunk_elements);
  map.address.resize(static_cast<std::size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const hsize_t offset[1] = {static_cast<hsize_t>(k * map.chunk_elements)};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    h5_require(H5Dget_chunk_info_by_coord(dset, offset, &mask, &addr, &size) >= 0, DMUON_ERR_IO, what);
    // HDF5 sized each chunk by filtering a fill chunk: data plus the checksum.
    h5_require(addr != HADDR_UNDEF && size == static_cast<hsize_t>(map.chunk_bytes) + 4 && mask == 0, DMUON_ERR_IO,
               what + ": unexpected chunk allocation");
    map.address[static_cast<std::size_t>(k)] = h5_chunk_file_offset(addr, base);
  }
  h5_require(dset.close(), DMUON_ERR_IO, what);
  return map;
}

namespace {

// Every run of a piece that lies inside one chunk, in file order.
template <class F>
void for_each_run(const DatasetJob& job, const ChunkMap& map, F&& f) {
  const int64_t c = map.chunk_elements;
  for (const Piece& p : job.pieces)
    for (int64_t e = p.file; e < p.file + p.count;) {
      const int64_t k = e / c, end = std::min(p.file + p.count, (k + 1) * c);
      f(k, e - k * c, p.mem + (e - p.file), end - e);  // chunk, element in chunk, memory element, count
      e = end;
    }
}

}  // namespace

namespace {

// Blocks small enough to stay in cache between the read (or the pwrite) and
// the two checksums.
constexpr int64_t kBlockBytes = int64_t{1} << 20;

// Every block of every run, with the piece it belongs to.
template <class F>
void for_each_block(const DatasetJob& job, const ChunkMap& map, F&& f) {
  const int64_t es = static_cast<int64_t>(job.elem);
  const int64_t block = std::max<int64_t>(1, kBlockBytes / es);
  std::size_t piece = 0;
  int64_t piece_end = job.pieces.empty() ? 0 : job.pieces[0].file + job.pieces[0].count;
  for_each_run(job, map, [&](int64_t k, int64_t in_chunk, int64_t mem, int64_t count) {
    while (k * map.chunk_elements + in_chunk >= piece_end) {
      ++piece;
      piece_end = job.pieces[piece].file + job.pieces[piece].count;
    }
    for (int64_t at = 0; at < count; at += block)
      f(piece, k, (in_chunk + at) * es, job.host + (mem + at) * es, std::min(block, count - at) * es);
  });
}

// One CRC piece per job piece, at canonical byte offsets.
std::vector<CrcPiece> crc_start(const DatasetJob& job) {
  std::vector<CrcPiece> crcs;
  for (const Piece& p : job.pieces)
    crcs.push_back({p.file * static_cast<int64_t>(job.elem), p.count * static_cast<int64_t>(job.elem), 0});
  return crcs;
}

}  // namespace

int64_t chunk_elements_of(const DatasetJob& job) { return std::max<int64_t>(1, std::min(job.chunk, job.total)); }

std::vector<CrcPiece> checksum_chunks(const DatasetJob& job, int64_t chunk_elements, Fletcher32Part* parts) {
  ChunkMap map;
  map.chunk_elements = chunk_elements;
  map.chunk_bytes = chunk_elements * static_cast<int64_t>(job.elem);
  std::vector<CrcPiece> crcs = crc_start(job);
  for_each_block(job, map, [&](std::size_t piece, int64_t k, int64_t pos, const char* data, int64_t bytes) {
    crcs[piece].crc = crc32c(data, static_cast<std::size_t>(bytes), crcs[piece].crc);
    fletcher32_add(parts[k], fletcher32_part(data, static_cast<std::size_t>(bytes), static_cast<uint64_t>(pos),
                                             static_cast<uint64_t>(map.chunk_bytes)));
  });
  return crcs;
}

void write_chunks(int fd, const std::string& path, const DatasetJob& job, const ChunkMap& map) {
  const int64_t es = static_cast<int64_t>(job.elem);
  for_each_run(job, map, [&](int64_t k, int64_t in_chunk, int64_t mem, int64_t count) {
    pwrite_exact(fd, job.host + mem * es, static_cast<std::size_t>(count * es),
                 map.address[static_cast<std::size_t>(k)] + static_cast<uint64_t>(in_chunk * es),
                 "cannot write '" + path + "'");
  });
}

void sum_parts(MPI_Comm comm, std::vector<Fletcher32Part>& parts, std::vector<uint64_t>* stored) {
  // Residues below 65535 summed over the ranks fit easily in 64 bits.
  std::vector<uint64_t> flat;
  flat.reserve(parts.size() * 4);
  for (std::size_t k = 0; k < parts.size(); ++k) {
    flat.insert(flat.end(), {parts[k].sum1, parts[k].sum2, parts[k].nonzero});
    if (stored) flat.push_back((*stored)[k]);
  }
  allreduce_sum_u64(comm, flat.data(), flat.size(), "MPI_Allreduce (fletcher32)");
  const std::size_t stride = stored ? 4 : 3;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    Fletcher32Part sum;
    fletcher32_add(sum, {flat[k * stride] % 65535, flat[k * stride + 1] % 65535, flat[k * stride + 2] ? 1u : 0u});
    parts[k] = sum;
    if (stored) (*stored)[k] = flat[k * stride + 3];
  }
}

void write_checksums(int fd, const std::string& path, const ChunkMap& map, const Fletcher32Part* parts, int rank,
                     int world) {
  for (std::size_t k = static_cast<std::size_t>(rank); k < map.address.size(); k += static_cast<std::size_t>(world)) {
    const uint32_t v = fletcher32_value(parts[k]);  // little-endian in the file, as H5Zfletcher32.c stores it
    pwrite_exact(fd, &v, 4, map.address[k] + static_cast<uint64_t>(map.chunk_bytes), "cannot write '" + path + "'");
  }
}

// ------------------------------------------------------------ restore
bool direct_chunk_map(hid_t dset, const DatasetJob& job, uint64_t base, int rank, int world, ChunkMap& map) {
  H5Id dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_nfilters(dcpl) != 1) return false;
  unsigned flags = 0;
  size_t nelmts = 0;
  char name[64];
  unsigned config = 0;
  if (H5Pget_filter2(dcpl, 0, &flags, &nelmts, nullptr, sizeof name, name, &config) != H5Z_FILTER_FLETCHER32)
    return false;
  hsize_t chunk[1] = {0};
  if (H5Pget_chunk(dcpl, 1, chunk) != 1 || chunk[0] == 0) return false;
  map.chunk_elements = static_cast<int64_t>(chunk[0]);
  map.chunk_bytes = map.chunk_elements * static_cast<int64_t>(job.elem);
  const int64_t n = chunk_count(job.total, map.chunk_elements);
  map.address.assign(static_cast<std::size_t>(n), HADDR_UNDEF);
  std::vector<char> need(static_cast<std::size_t>(n), 0);
  for (int64_t k = rank; k < n; k += world) need[static_cast<std::size_t>(k)] = 1;
  for_each_run(job, map, [&](int64_t k, int64_t, int64_t, int64_t) { need[static_cast<std::size_t>(k)] = 1; });
  for (int64_t k = 0; k < n; ++k) {
    if (!need[static_cast<std::size_t>(k)]) continue;
    const hsize_t offset[1] = {static_cast<hsize_t>(k * map.chunk_elements)};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    // A chunk never written, stored in another size or with its filter
    // skipped is for HDF5 to read (and judge).
    if (H5Dget_chunk_info_by_coord(dset, offset, &mask, &addr, &size) < 0 || addr == HADDR_UNDEF ||
        size != static_cast<hsize_t>(map.chunk_bytes) + 4 || mask != 0) {
      hdf5_error_text();  // clears HDF5's error stack
      return false;
    }
    map.address[static_cast<std::size_t>(k)] = h5_chunk_file_offset(addr, base);
  }
  return true;
}

namespace {
[[noreturn]] void fail_chunk_read(const std::string& path, const DatasetJob& job, int err) {
  if (err) fail(DMUON_ERR_IO, "cannot read '" + path + "': " + std::strerror(err));
  fail(DMUON_ERR_CHECKPOINT_CORRUPT, "'" + path + "' ends inside " + job.path + " (truncated)");
}
}  // namespace

std::vector<CrcPiece> read_chunks(int fd, const std::string& path, const DatasetJob& job, const ChunkMap& map,
                                  Fletcher32Part* parts, uint64_t* stored, int rank, int world, ReadAhead* ahead) {
  const int64_t es = static_cast<int64_t>(job.elem);
  const auto fail_read = [&](int err) { fail_chunk_read(path, job, err); };
  int err = 0;
  std::vector<CrcPiece> crcs = crc_start(job);
  // Block by block: each block is checksummed while the read left it in cache.
  for_each_block(job, map, [&](std::size_t piece, int64_t k, int64_t pos, const char* data, int64_t bytes) {
    if (ahead) ahead->advance(static_cast<uint64_t>(bytes));
    if (!pread_exact(fd, const_cast<char*>(data), static_cast<std::size_t>(bytes),
                     map.address[static_cast<std::size_t>(k)] + static_cast<uint64_t>(pos), &err))
      fail_read(err);
    crcs[piece].crc = crc32c(data, static_cast<std::size_t>(bytes), crcs[piece].crc);
    fletcher32_add(parts[k], fletcher32_part(data, static_cast<std::size_t>(bytes), static_cast<uint64_t>(pos),
                                             static_cast<uint64_t>(map.chunk_bytes)));
  });
  const int64_t n = static_cast<int64_t>(map.address.size());
  for (int64_t k = rank; k < n; k += world) {
    const uint64_t at = map.address[static_cast<std::size_t>(k)];
    // The bytes of the last chunk past the dataset's end are part of what
    // fletcher32 covers (HDF5 stores edge chunks whole).
    const int64_t used = std::min(map.chunk_bytes, job.total * es - k * map.chunk_bytes);
    if (used < map.chunk_bytes) {
      std::vector<char> tail(static_cast<std::size_t>(map.chunk_bytes - used));
      if (!pread_exact(fd, tail.data(), tail.size(), at + static_cast<uint64_t>(used), &err)) fail_read(err);
      fletcher32_add(parts[k], fletcher32_part(tail.data(), tail.size(), static_cast<uint64_t>(used),
                                               static_cast<uint64_t>(map.chunk_bytes)));
    }
    uint32_t v = 0;
    if (!pread_exact(fd, reinterpret_cast<char*>(&v), 4, at + static_cast<uint64_t>(map.chunk_bytes), &err)) fail_read(err);
    stored[k] = v;
  }
  return crcs;
}

void copy_chunks(int fd, const std::string& path, const DatasetJob& job, const ChunkMap& map) {
  const int64_t es = static_cast<int64_t>(job.elem);
  int err = 0;
  // Whole runs (up to a chunk) per call: nothing is checksummed between reads.
  for_each_run(job, map, [&](int64_t k, int64_t in_chunk, int64_t mem, int64_t count) {
    if (!pread_exact(fd, job.host + mem * es, static_cast<std::size_t>(count * es),
                     map.address[static_cast<std::size_t>(k)] + static_cast<uint64_t>(in_chunk * es), &err))
      fail_chunk_read(path, job, err);
  });
}

void add_read_ranges(const DatasetJob& job, const ChunkMap& map, ReadAhead& ahead) {
  const int64_t es = static_cast<int64_t>(job.elem);
  for_each_run(job, map, [&](int64_t k, int64_t in_chunk, int64_t, int64_t count) {
    ahead.add(map.address[static_cast<std::size_t>(k)] + static_cast<uint64_t>(in_chunk * es),
              static_cast<uint64_t>(count * es));
  });
}

// ------------------------------------------------------------ seal extents
std::vector<SealExtent> data_chunk_extents(hid_t file, uint64_t base) {
  std::vector<SealExtent> out;
  const Kind kinds[] = {Kind::muon, Kind::adam};
  const Buffer buffers[] = {Buffer::param, Buffer::momentum, Buffer::exp_avg, Buffer::exp_avg_sq, Buffer::master};
  for (const Kind k : kinds)
    for (int di = 0; di < kNumDtypes; ++di)
      for (const Buffer b : buffers) {
        const std::string path = dataset_path(k, static_cast<Dtype>(di), b);
        // Each link on the way must exist (H5Lexists fails on a missing parent).
        bool exists = true;
        for (std::size_t at = path.find('/', 1); exists; at = path.find('/', at + 1)) {
          exists = H5Lexists(file, path.substr(0, at).c_str(), H5P_DEFAULT) > 0;
          if (at == std::string::npos) break;
        }
        H5ObjectInfo info;
        if (!exists || h5_object_info_by_name(file, path.c_str(), &info, H5O_INFO_BASIC) < 0 ||
            info.type != H5O_TYPE_DATASET) {
          hdf5_error_text();  // clears HDF5's error stack
          continue;
        }
        H5Id dset = h5_dataset(H5Dopen2(file, path.c_str(), H5P_DEFAULT), DMUON_ERR_IO, "cannot open " + path);
        H5Id dcpl(H5Dget_create_plist(dset), H5Pclose);
        H5Id type(H5Dget_type(dset), H5Tclose);
        if (!dcpl.valid() || !type.valid() || H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_nfilters(dcpl) != 1)
          continue;
        const H5T_class_t cls = H5Tget_class(type);
        if (cls != H5T_INTEGER && cls != H5T_FLOAT) continue;
        unsigned flags = 0, config = 0;
        size_t nelmts = 0;
        char name[64];
        if (H5Pget_filter2(dcpl, 0, &flags, &nelmts, nullptr, sizeof name, name, &config) != H5Z_FILTER_FLETCHER32)
          continue;
        // HDF5 1.10.8 takes no H5S_ALL here: the dataset's own space.
        H5Id space = h5_space(H5Dget_space(dset), DMUON_ERR_IO, "cannot read the shape of " + path);
        hsize_t n = 0;
        h5_require(H5Dget_num_chunks(dset, space, &n) >= 0, DMUON_ERR_IO, "cannot count the chunks of " + path);
        for (hsize_t i = 0; i < n; ++i) {
          hsize_t offset[H5S_MAX_RANK] = {};
          unsigned mask = 0;
          haddr_t addr = HADDR_UNDEF;
          hsize_t size = 0;
          h5_require(H5Dget_chunk_info(dset, space, i, offset, &mask, &addr, &size) >= 0, DMUON_ERR_IO,
                     "cannot locate the chunks of " + path);
          // A chunk whose filter was skipped is not checked by fletcher32: it stays sealed.
          if (addr != HADDR_UNDEF && size > 0 && mask == 0) out.push_back({h5_chunk_file_offset(addr, base), size});
        }
      }
  return out;
}

}  // namespace dmuon::ckpt
