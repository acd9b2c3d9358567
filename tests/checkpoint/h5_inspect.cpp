#include "h5_inspect.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/error.hpp"
#include "file_seal.hpp"
#include "h5_compat.hpp"

namespace ckpt_test {

namespace {
herr_t visit(hid_t obj, const char* name, const dmuon::ckpt::H5ObjectInfo* info, void* out) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
  uint64_t crc = 0;
  if (H5Aexists(d, "crc32c") > 0) {
    hid_t a = H5Aopen(d, "crc32c", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_UINT64, &crc);
    H5Aclose(a);
  }
  H5Dclose(d);
  (*static_cast<std::map<std::string, uint64_t>*>(out))[std::string("/") + name] = crc;
  return 0;
}

// HDF5 addresses count from the superblock, which follows the user block
// (where the seal lives): add this to get a file offset.
hsize_t user_block_bytes(hid_t file) {
  hsize_t bytes = 0;
  hid_t fcpl = H5Fget_create_plist(file);
  H5Pget_userblock(fcpl, &bytes);
  H5Pclose(fcpl);
  return bytes;
}
}  // namespace

std::map<std::string, uint64_t> dataset_crcs(const std::string& file) {
  std::map<std::string, uint64_t> out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  dmuon::ckpt::h5_visit(f, visit, &out, H5O_INFO_BASIC);
  H5Fclose(f);
  return out;
}

int64_t first_chunk_address(const std::string& file, const std::string& dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return -1;
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  unsigned mask = 0;
  hsize_t offset[1] = {0};
  if (d >= 0) H5Dget_chunk_info_by_coord(d, offset, &mask, &addr, &size);
  if (d >= 0) H5Dclose(d);
  const hsize_t base = user_block_bytes(f);
  H5Fclose(f);
  return addr == HADDR_UNDEF ? -1 : static_cast<int64_t>(dmuon::ckpt::h5_chunk_file_offset(addr, base));
}

bool rewrite_float(const std::string& file, const std::string& dataset, int64_t i, float v) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return false;
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  hsize_t start[1] = {static_cast<hsize_t>(i)}, count[1] = {1};
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
  hid_t mem = H5Screate_simple(1, count, nullptr);
  const herr_t rc = H5Dwrite(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, &v);
  H5Sclose(mem);
  H5Sclose(space);
  H5Dclose(d);
  return H5Fclose(f) >= 0 && rc >= 0;
}

bool rewrite_root_attr_i64(const std::string& file, const std::string& name, int64_t v) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return false;
  hid_t a = H5Aopen(f, name.c_str(), H5P_DEFAULT);
  const herr_t rc = a >= 0 ? H5Awrite(a, H5T_NATIVE_INT64, &v) : -1;
  if (a >= 0) H5Aclose(a);
  return H5Fclose(f) >= 0 && rc >= 0;
}

bool flip_byte(const std::string& file, int64_t offset) {
  const int fd = ::open(file.c_str(), O_RDWR);
  if (fd < 0) return false;
  unsigned char b = 0;
  bool ok = ::pread(fd, &b, 1, offset) == 1;
  b ^= 0x5a;
  ok = ok && ::pwrite(fd, &b, 1, offset) == 1;
  ::close(fd);
  return ok;
}

int64_t object_header_address(const std::string& file, const std::string& object) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return -1;
  dmuon::ckpt::H5ObjectInfo info;
  haddr_t addr = HADDR_UNDEF;
  const bool ok = dmuon::ckpt::h5_object_info_by_name(f, object.c_str(), &info, H5O_INFO_BASIC) >= 0 &&
                  dmuon::ckpt::h5_object_address(f, info, &addr) >= 0;
  const hsize_t user_block = user_block_bytes(f);
  H5Fclose(f);
  return ok ? static_cast<int64_t>(addr + user_block) : -1;
}

bool reseal(const std::string& file) {
  try {
    dmuon::ckpt::seal_file(MPI_COMM_SELF, file);
    return true;
  } catch (const dmuon::Error& e) {
    std::fprintf(stderr, "reseal('%s'): %s\n", file.c_str(), e.what());
    return false;
  }
}

bool copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  return static_cast<bool>(in) && static_cast<bool>(out);
}

int64_t file_size(const std::string& file) {
  struct stat st;
  return ::stat(file.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

std::vector<dmuon::ckpt::IndexRow> read_index(const std::string& file) {
  std::vector<dmuon::ckpt::IndexRow> rows;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return rows;
  hid_t d = H5Dopen2(f, dmuon::ckpt::kIndexPath, H5P_DEFAULT);
  hid_t space = d >= 0 ? H5Dget_space(d) : H5I_INVALID_HID;
  const hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : 0;
  hid_t type = dmuon::ckpt::index_file_type();  // packed little-endian: the host's layout too
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n > 0 ? n : 0) * dmuon::ckpt::kIndexRowBytes);
  if (n > 0 && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0) rows = dmuon::ckpt::unpack_index(bytes);
  H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return rows;
}

}  // namespace ckpt_test
