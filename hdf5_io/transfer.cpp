#include "transfer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "core/mapped_memory.hpp"
#include "crc32c.hpp"
#include "h5_util.hpp"

namespace dmuon::ckpt {

HostBuffer::HostBuffer(std::size_t bytes) : n_(bytes) {
  const std::size_t length = bytes ? bytes : 1;
  p_ = std::unique_ptr<char, Unmap>(static_cast<char*>(map_anonymous(length)), Unmap{length});
}

void HostBuffer::Unmap::operator()(char* p) const noexcept { ::munmap(p, length); }

std::vector<Piece> merge_pieces(std::vector<Piece> pieces) {
  std::vector<Piece> out;
  for (const Piece& p : pieces) {
    if (p.count <= 0) continue;
    if (!out.empty() && out.back().file + out.back().count == p.file && out.back().mem + out.back().count == p.mem)
      out.back().count += p.count;
    else
      out.push_back(p);
  }
  return out;
}

std::vector<CrcPiece> crc_pieces(const DatasetJob& job) {
  std::vector<CrcPiece> out;
  for (const Piece& p : job.pieces) {
    const int64_t bytes = p.count * static_cast<int64_t>(job.elem);
    const uint32_t crc = crc32c(job.host + p.mem * static_cast<int64_t>(job.elem), static_cast<std::size_t>(bytes));
    const int64_t offset = p.file * static_cast<int64_t>(job.elem);
    // Pieces adjacent in the file fold into one, so few travel to the other ranks.
    if (!out.empty() && out.back().offset + out.back().length == offset) {
      out.back().crc = crc32c_combine(out.back().crc, crc, static_cast<uint64_t>(bytes));
      out.back().length += bytes;
    } else {
      out.push_back({offset, bytes, crc});
    }
  }
  return out;
}

namespace {
// Select the pieces in a 1-D space of `extent` elements, on the file or memory side.
H5Id selection(int64_t extent, const std::vector<Piece>& pieces, bool file_side, int status, const std::string& what) {
  const hsize_t dims[1] = {static_cast<hsize_t>(std::max<int64_t>(extent, 1))};
  H5Id space = h5_space(H5Screate_simple(1, dims, nullptr), status, what);
  if (pieces.empty()) {
    h5_require(H5Sselect_none(space) >= 0, status, what);
    return space;
  }
  bool first = true;
  for (const Piece& p : pieces) {
    const hsize_t start[1] = {static_cast<hsize_t>(file_side ? p.file : p.mem)};
    const hsize_t count[1] = {static_cast<hsize_t>(p.count)};
    h5_require(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start, nullptr, count, nullptr) >= 0,
               status, what);
    first = false;
  }
  return space;
}

// File pieces merged on the file side only: fewer hyperslabs for a share that
// is contiguous in the file but split by padding in memory.
std::vector<Piece> file_runs(const std::vector<Piece>& pieces) {
  std::vector<Piece> out;
  for (const Piece& p : pieces) {
    if (!out.empty() && out.back().file + out.back().count == p.file)
      out.back().count += p.count;
    else
      out.push_back(p);
  }
  return out;
}
}  // namespace

void create_and_write(hid_t file, const DatasetJob& job, uint32_t crc) {
  const std::string what = "cannot write " + job.path;
  const hsize_t dims[1] = {static_cast<hsize_t>(job.total)};
  H5Id fspace = h5_space(H5Screate_simple(1, dims, nullptr), DMUON_ERR_IO, what);
  H5Id dcpl = h5_plist(H5Pcreate(H5P_DATASET_CREATE), DMUON_ERR_IO, what);
  const hsize_t chunk[1] = {static_cast<hsize_t>(std::max<int64_t>(1, std::min(job.chunk, job.total)))};
  h5_require(H5Pset_chunk(dcpl, 1, chunk) >= 0, DMUON_ERR_IO, what);
  h5_require(H5Pset_fletcher32(dcpl) >= 0, DMUON_ERR_IO, what);
  // Every element is written once: no fill values (they would double the I/O).
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  // No modification times in object headers: the same state gives the same file bytes.
  H5Pset_obj_track_times(dcpl, 0);
  H5Id lcpl = h5_plist(H5Pcreate(H5P_LINK_CREATE), DMUON_ERR_IO, what);
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id dset = h5_dataset(H5Dcreate2(file, job.path.c_str(), job.file_type, fspace, lcpl, dcpl, H5P_DEFAULT),
                         DMUON_ERR_IO, what);
  write_attr_u32(dset, kCrcAttr, crc);
  write_attr_str(dset, "element_type", job.element_type);

  H5Id fsel = selection(job.total, file_runs(job.pieces), true, DMUON_ERR_IO, what);
  H5Id msel = selection(job.host_elements, job.pieces, false, DMUON_ERR_IO, what);
  static char dummy[16];
  h5_require(H5Dwrite(dset, job.file_type, msel, fsel, H5P_DEFAULT, job.host ? job.host : dummy) >= 0, DMUON_ERR_IO,
             what);
  h5_require(dset.close(), DMUON_ERR_IO, what);
}

H5Id open_for_read(hid_t file, const DatasetJob& job, uint32_t& stored) {
  constexpr int bad = DMUON_ERR_CHECKPOINT_CORRUPT;
  const std::string what = "cannot read " + job.path;
  H5Id dset = h5_dataset(H5Dopen2(file, job.path.c_str(), H5P_DEFAULT), bad, what + ": dataset missing or unreadable");
  {
    H5Id space = h5_space(H5Dget_space(dset), bad, what);
    H5Id type = h5_type(H5Dget_type(dset), bad, what);
    hsize_t dims[1] = {0};
    require(H5Sget_simple_extent_ndims(space) == 1 && H5Sget_simple_extent_dims(space, dims, nullptr) == 1 &&
                dims[0] == static_cast<hsize_t>(job.total),
            bad, job.path + " has " + std::to_string(dims[0]) + " elements, the index says " + std::to_string(job.total));
    require(H5Tequal(type, job.file_type) > 0, bad, job.path + " has an unexpected element type");
  }
  stored = static_cast<uint32_t>(read_attr_u64(dset, kCrcAttr, bad));
  return dset;
}

void read_with_hdf5(hid_t dset, const DatasetJob& job) {
  constexpr int bad = DMUON_ERR_CHECKPOINT_CORRUPT;
  const std::string what = "cannot read " + job.path;
  H5Id fsel = selection(job.total, file_runs(job.pieces), true, bad, what);
  H5Id msel = selection(job.host_elements, job.pieces, false, bad, what);
  // Independent: a damaged chunk seen by one rank must not leave the others
  // waiting inside a collective read; the outcome is agreed afterwards.
  H5Id dxpl = h5_plist(H5Pcreate(H5P_DATASET_XFER), bad, what);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_INDEPENDENT);
  bool monotone = true;
  for (std::size_t i = 1; i < job.pieces.size(); ++i) monotone = monotone && job.pieces[i].mem > job.pieces[i - 1].mem;
  if (monotone) {
    if (!job.pieces.empty()) h5_require(H5Dread(dset, job.file_type, msel, fsel, dxpl, job.host) >= 0, bad, what);
    return;
  }
  // HDF5 pairs file and memory elements in increasing order on both sides;
  // a model registered in another order than it was saved reads piece by piece.
  for (const Piece& p : job.pieces) {
    H5Id f1 = selection(job.total, {p}, true, bad, what);
    H5Id m1 = selection(job.host_elements, {p}, false, bad, what);
    h5_require(H5Dread(dset, job.file_type, m1, f1, dxpl, job.host) >= 0, bad, what);
  }
}

uint32_t read_pieces(hid_t file, const DatasetJob& job) {
  uint32_t stored = 0;
  H5Id dset = open_for_read(file, job, stored);
  read_with_hdf5(dset, job);
  return stored;
}

}  // namespace dmuon::ckpt
