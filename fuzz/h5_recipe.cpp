#include "h5_recipe.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "crc32c.hpp"
#include "format.hpp"
#include "h5_compat.hpp"
#include "h5_util.hpp"

namespace fuzz {
namespace {

using dmuon::ckpt::H5Id;
using dmuon::ckpt::H5ObjectInfo;
using dmuon::ckpt::h5_object_info;
using dmuon::ckpt::h5_visit;

// The recipe's bytes; past the end every read is 0, so any input is a recipe.
class Bytes {
 public:
  Bytes(const uint8_t* p, std::size_t n) : p_(p), n_(n) {}
  uint8_t u8() { return at_ < n_ ? p_[at_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{u8()} << (8 * i);
    return v;
  }
  bool done() const { return at_ >= n_; }
  // One of n choices (n > 0).
  std::size_t pick(std::size_t n) { return n ? u16() % n : 0; }

 private:
  const uint8_t* p_;
  std::size_t n_;
  std::size_t at_ = 0;
};

// Values that find off-by-one, sign, overflow and size bugs, near the original.
int64_t pick_int(Bytes& b, int64_t orig) {
  const uint64_t u = static_cast<uint64_t>(orig);
  switch (b.u8() % 12) {
    case 0: return 0;
    case 1: return 1;
    case 2: return -1;
    case 3: return static_cast<int64_t>(u + 1);
    case 4: return static_cast<int64_t>(u - 1);
    case 5: return static_cast<int64_t>(u * 2);
    case 6: return std::numeric_limits<int64_t>::max();
    case 7: return std::numeric_limits<int64_t>::min();
    case 8: return std::numeric_limits<int32_t>::max() + int64_t{1};
    case 9: return int64_t{1} << (b.u8() % 63);
    case 10: return static_cast<int64_t>(u + static_cast<uint64_t>(static_cast<int8_t>(b.u8())));
    default: return static_cast<int64_t>(b.u64());
  }
}

double pick_double(Bytes& b, double orig) {
  switch (b.u8() % 10) {
    case 0: return 0.0;
    case 1: return -orig;
    case 2: return std::numeric_limits<double>::quiet_NaN();
    case 3: return std::numeric_limits<double>::infinity();
    case 4: return -std::numeric_limits<double>::infinity();
    case 5: return 1e300;
    case 6: return std::numeric_limits<double>::denorm_min();
    case 7: return orig * 2;
    case 8: return static_cast<double>(pick_int(b, 0));  // orig may not fit an int64
    default: {
      const uint64_t bits = b.u64();
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
  }
}

std::string pick_string(Bytes& b, const std::string& orig) {
  switch (b.u8() % 7) {
    case 0: return "";
    case 1: return orig.empty() ? "x" : orig.substr(0, orig.size() - 1);
    case 2: return orig + static_cast<char>(b.u8());
    case 3: return std::string(300, 'n');
    case 4: return dmuon::ckpt::kFormatName;
    case 5: {
      std::string s = orig.empty() ? std::string(1, 'a') : orig;
      s[b.pick(s.size())] = static_cast<char>(b.u8());  // may put a NUL inside
      return s;
    }
    default: {
      std::string s(b.u8() % 40, '\0');
      for (char& c : s) c = static_cast<char>(b.u8());
      return s;
    }
  }
}

// Every group and dataset, in name order (deterministic for a given file).
struct Objects {
  std::vector<std::string> groups{"/"}, datasets;
};
herr_t collect(hid_t, const char* name, const H5ObjectInfo* info, void* out) {
  auto* o = static_cast<Objects*>(out);
  if (std::strcmp(name, ".") == 0) return 0;
  (info->type == H5O_TYPE_DATASET ? o->datasets : o->groups).push_back(std::string("/") + name);
  return 0;
}
Objects objects(hid_t file) {
  Objects o;
  h5_visit(file, collect, &o, H5O_INFO_BASIC);
  return o;
}

std::string pick_object(Bytes& b, const Objects& o) {
  const std::size_t n = o.groups.size() + o.datasets.size();
  const std::size_t i = b.pick(n);
  return i < o.groups.size() ? o.groups[i] : o.datasets[i - o.groups.size()];
}

// A dataset's elements as raw bytes of its own file type (at most 1 MiB).
struct Raw {
  H5Id type;
  std::vector<hsize_t> dims;
  std::vector<unsigned char> bytes;
};
bool read_raw(hid_t file, const std::string& path, Raw* r) {
  H5Id d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) return false;
  r->type = H5Id(H5Dget_type(d), H5Tclose);
  H5Id space(H5Dget_space(d), H5Sclose);
  if (!r->type.valid() || !space.valid()) return false;
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0 || rank > 4) return false;
  r->dims.assign(static_cast<std::size_t>(rank), 0);
  H5Sget_simple_extent_dims(space, r->dims.data(), nullptr);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  const std::size_t elem = H5Tget_size(r->type);
  if (n < 0 || elem == 0 || H5Tis_variable_str(r->type) > 0 || static_cast<std::size_t>(n) * elem > (1u << 20))
    return false;
  r->bytes.assign(static_cast<std::size_t>(n) * elem, 0);
  return n == 0 || H5Dread(d, r->type, H5S_ALL, H5S_ALL, H5P_DEFAULT, r->bytes.data()) >= 0;
}

bool write_raw(hid_t file, const std::string& path, const Raw& r) {
  H5Id d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
  return d.valid() && H5Dwrite(d, r.type, H5S_ALL, H5S_ALL, H5P_DEFAULT, r.bytes.data()) >= 0;
}

// Set a scalar attribute (created when missing) of a numeric type.
bool put_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* v) {
  if (H5Aexists(obj, name.c_str()) > 0 && H5Adelete(obj, name.c_str()) < 0) return false;
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Id a(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  return a.valid() && H5Awrite(a, mem_type, v) >= 0;
}
bool put_str_attr(hid_t obj, const std::string& name, const std::string& v) {
  H5Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, std::max<std::size_t>(v.size(), 1));
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  const char nul = 0;
  return put_attr(obj, name, t, t, v.empty() ? &nul : v.data());
}

H5Id open_object(hid_t file, const std::string& path) { return H5Id(H5Oopen(file, path.c_str(), H5P_DEFAULT), H5Oclose); }

// An object's scalar attributes of fixed-size types, to carry over when the
// object is created again.
struct SavedAttr {
  std::string name;
  H5Id type;
  std::vector<unsigned char> value;
};
std::vector<SavedAttr> save_attrs(hid_t file, const std::string& path) {
  std::vector<SavedAttr> out;
  H5Id obj = open_object(file, path);
  H5ObjectInfo info;
  if (!obj.valid() || h5_object_info(obj, &info, H5O_INFO_NUM_ATTRS) < 0) return out;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    char name[256] = {0};
    if (H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) < 0) continue;
    H5Id a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    SavedAttr s{name, H5Id(a.valid() ? H5Aget_type(a) : -1, H5Tclose), {}};
    H5Id space(a.valid() ? H5Aget_space(a) : -1, H5Sclose);
    if (!s.type.valid() || !space.valid() || H5Sget_simple_extent_npoints(space) != 1 ||
        H5Tis_variable_str(s.type) > 0 || H5Tget_size(s.type) > 4096)
      continue;
    s.value.assign(H5Tget_size(s.type), 0);
    if (H5Aread(a, s.type, s.value.data()) >= 0) out.push_back(std::move(s));
  }
  return out;
}

// ---- the ops; each returns whether it changed the file --------------------

// Operands: row, field, [shape entry | name byte], value.
bool op_index_field(hid_t file, Bytes& b) {
  Raw r;
  if (!read_raw(file, dmuon::ckpt::kIndexPath, &r) || r.bytes.size() < dmuon::ckpt::kIndexRowBytes ||
      H5Tget_size(r.type) != dmuon::ckpt::kIndexRowBytes)
    return false;
  const std::size_t rows = r.bytes.size() / dmuon::ckpt::kIndexRowBytes;
  unsigned char* row = r.bytes.data() + b.pick(rows) * dmuon::ckpt::kIndexRowBytes;
  // Offsets from docs/checkpoint-format.md: name, kind, dtype, ndim, owner,
  // shape[8], numel, offset, lr_mul, wd_mul.
  switch (b.u8() % 10) {
    case 0: row[b.pick(dmuon::ckpt::kIndexNameBytes)] = b.u8(); break;
    case 1: case 2: case 3: case 4: {
      const std::size_t at = 256 + 4 * static_cast<std::size_t>((b.u8() % 4));
      int32_t v;
      std::memcpy(&v, row + at, 4);
      v = static_cast<int32_t>(pick_int(b, v));
      std::memcpy(row + at, &v, 4);
      break;
    }
    case 5: case 6: case 7: {
      const std::size_t at = 272 + 8 * static_cast<std::size_t>(b.u8() % 10);  // shape[0..7], numel, offset
      int64_t v;
      std::memcpy(&v, row + at, 8);
      v = pick_int(b, v);
      std::memcpy(row + at, &v, 8);
      break;
    }
    default: {
      const std::size_t at = 352 + 8 * static_cast<std::size_t>(b.u8() % 2);
      double v;
      std::memcpy(&v, row + at, 8);
      v = pick_double(b, v);
      std::memcpy(row + at, &v, 8);
    }
  }
  return write_raw(file, dmuon::ckpt::kIndexPath, r);
}

// Operands: object, attribute, value. Keeps the attribute's class.
bool op_attr_value(hid_t file, Bytes& b) {
  const Objects o = objects(file);
  H5Id obj = open_object(file, pick_object(b, o));
  H5ObjectInfo info;
  if (!obj.valid() || h5_object_info(obj, &info, H5O_INFO_NUM_ATTRS) < 0 || info.num_attrs == 0) return false;
  char name[256] = {0};
  if (H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, b.pick(info.num_attrs), name, sizeof name,
                         H5P_DEFAULT) < 0)
    return false;
  H5Id a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  H5Id t(a.valid() ? H5Aget_type(a) : -1, H5Tclose);
  H5Id space(a.valid() ? H5Aget_space(a) : -1, H5Sclose);
  if (!t.valid() || !space.valid() || H5Sget_simple_extent_npoints(space) != 1) return false;  // scalars only
  switch (H5Tget_class(t)) {
    case H5T_INTEGER: {
      int64_t v = 0;
      if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) return false;
      v = pick_int(b, v);
      return H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0;
    }
    case H5T_FLOAT: {
      double v = 0;
      if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) return false;
      v = pick_double(b, v);
      return H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0;
    }
    case H5T_STRING: {
      const std::size_t size = H5Tget_size(t);
      if (H5Tis_variable_str(t) > 0 || size == 0 || size > 4096) return false;
      std::string v(size, '\0');
      if (H5Aread(a, t, &v[0]) < 0) return false;
      while (!v.empty() && v.back() == '\0') v.pop_back();
      a.reset();
      return put_str_attr(obj, name, pick_string(b, v));
    }
    default: return false;
  }
}

// Operands: object, attribute (or a new name), new type. Replaces or adds an
// attribute with another type: string, int32, float64, a 2-element array,
// uint32 (the type of the checksums), or deletes it.
bool op_attr_retype(hid_t file, Bytes& b) {
  const Objects o = objects(file);
  H5Id obj = open_object(file, pick_object(b, o));
  H5ObjectInfo info;
  if (!obj.valid() || h5_object_info(obj, &info, H5O_INFO_NUM_ATTRS) < 0) return false;
  char name[256] = "fuzz_extra";
  if (info.num_attrs > 0 && b.u8() % 4 != 0)
    H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, b.pick(info.num_attrs), name, sizeof name, H5P_DEFAULT);
  const int64_t v = pick_int(b, 1);
  switch (b.u8() % 6) {
    case 0: return put_str_attr(obj, name, pick_string(b, "1"));
    case 1: {
      const int32_t i = static_cast<int32_t>(v);
      return put_attr(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &i);
    }
    case 2: {
      const double d = pick_double(b, 1.0);
      return put_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d);
    }
    case 3: {
      if (H5Aexists(obj, name) > 0 && H5Adelete(obj, name) < 0) return false;
      const hsize_t two[1] = {2};
      H5Id space(H5Screate_simple(1, two, nullptr), H5Sclose);
      H5Id a(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      const int64_t vals[2] = {v, v};
      return a.valid() && H5Awrite(a, H5T_NATIVE_INT64, vals) >= 0;
    }
    case 4: {
      const uint32_t u = static_cast<uint32_t>(v);
      return put_attr(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &u);
    }
    default: return H5Aexists(obj, name) > 0 && H5Adelete(obj, name) >= 0;
  }
}

// Operands: dataset, byte position, value: one byte of a dataset's elements.
bool op_dataset_byte(hid_t file, Bytes& b) {
  const Objects o = objects(file);
  if (o.datasets.empty()) return false;
  const std::string path = o.datasets[b.pick(o.datasets.size())];
  Raw r;
  if (!read_raw(file, path, &r) || r.bytes.empty()) return false;
  r.bytes[static_cast<std::size_t>(b.u64() % r.bytes.size())] = b.u8();
  return write_raw(file, path, r);
}

// Operands: dataset, what changes (length, element type, rank, layout),
// the new value. The dataset is deleted and created again with its data (cut,
// padded with zeros, or converted by HDF5) and its attributes.
bool op_dataset_recreate(hid_t file, Bytes& b) {
  const Objects o = objects(file);
  if (o.datasets.empty()) return false;
  const std::string path = o.datasets[b.pick(o.datasets.size())];
  Raw r;
  if (!read_raw(file, path, &r) || r.dims.empty()) return false;
  const std::size_t elem = H5Tget_size(r.type);
  hsize_t n = 1;
  for (hsize_t d : r.dims) n *= d;
  H5Id type(H5Tcopy(r.type), H5Tclose);
  std::vector<hsize_t> dims{n};
  bool chunked = true, fletcher = true;
  switch (b.u8() % 4) {
    case 0: {  // length
      const hsize_t lengths[] = {0, 1, n - 1, n + 1, 2 * n, static_cast<hsize_t>(b.u16() % 4096)};
      dims[0] = std::min<hsize_t>(lengths[b.u8() % 6], 1u << 16);
      break;
    }
    case 1: {  // element type, same data converted where HDF5 can
      const hid_t types[] = {H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_STD_U16LE, H5T_STD_I32LE, H5T_STD_I64LE,
                             H5T_STD_U8LE,   H5T_IEEE_F32BE};
      type = H5Id(H5Tcopy(types[b.u8() % 7]), H5Tclose);
      break;
    }
    case 2:  // rank: 2-D, or a scalar
      if (b.u8() % 2 && n % 2 == 0 && n > 0) dims = {2, n / 2};
      else dims.clear();
      break;
    default:  // layout: contiguous without fletcher32, or chunked without it
      chunked = b.u8() % 2;
      fletcher = false;
  }
  const std::vector<SavedAttr> attrs = save_attrs(file, path);
  if (H5Ldelete(file, path.c_str(), H5P_DEFAULT) < 0) return false;
  H5Id space(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
             H5Sclose);
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  hsize_t total = 1;
  for (hsize_t d : dims) total *= d;
  if (chunked && !dims.empty() && total > 0) {
    std::vector<hsize_t> chunk(dims);
    for (hsize_t& c : chunk) c = std::min<hsize_t>(c, 1024);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    if (fletcher) H5Pset_fletcher32(dcpl);
  }
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id d(H5Dcreate2(file, path.c_str(), type, space, lcpl, dcpl, H5P_DEFAULT), H5Dclose);
  if (!d.valid()) return true;  // the old one is gone: still a change
  // The old elements, as many as fit, in the old type (HDF5 converts).
  std::vector<unsigned char> data(static_cast<std::size_t>(total) * elem, 0);
  if (!data.empty() && !r.bytes.empty()) std::memcpy(data.data(), r.bytes.data(), std::min(data.size(), r.bytes.size()));
  if (total > 0) H5Dwrite(d, r.type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
  for (const SavedAttr& a : attrs) put_attr(d, a.name, a.type, a.type, a.value.data());
  return true;
}

// Operand: object. Deletes a group or dataset.
bool op_delete(hid_t file, Bytes& b) {
  const Objects o = objects(file);
  const std::string path = pick_object(b, o);
  return path != "/" && H5Ldelete(file, path.c_str(), H5P_DEFAULT) >= 0;
}

// Operands: where, what. Adds a group or a small dataset under an existing
// group, or where dmuon looks for one (a missing buffer dataset).
bool op_add(hid_t file, Bytes& b) {
  const Objects o = objects(file);
  static const char* const wanted[] = {"/muon/fp32/param", "/muon/bf16/momentum", "/adam/fp32/exp_avg",
                                       "/adam/step",       "/index",              "/hyperparameters"};
  std::string path = b.u8() % 2 ? std::string(wanted[b.u8() % 6])
                                : o.groups[b.pick(o.groups.size())] + "/fuzz_" + std::to_string(b.u8() % 4);
  if (path.compare(0, 2, "//") == 0) path.erase(0, 1);
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl, 1);
  if (b.u8() % 3 == 0) {
    H5Id g(H5Gcreate2(file, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    return g.valid();
  }
  const hsize_t dims[1] = {static_cast<hsize_t>(b.u8() % 64)};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  H5Id d(H5Dcreate2(file, path.c_str(), H5T_IEEE_F32LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  return d.valid();
}

// Operands: object, new place (another existing object's name, swapping the two).
bool op_rename(hid_t file, Bytes& b) {
  const Objects o = objects(file);
  const std::string from = pick_object(b, o), to = pick_object(b, o);
  if (from == "/" || to == "/" || from == to) return false;
  // Swap through a temporary name; a move into its own subtree is refused by HDF5.
  if (H5Lmove(file, from.c_str(), file, "/fuzz_swap", H5P_DEFAULT, H5P_DEFAULT) < 0) return false;
  if (H5Lmove(file, to.c_str(), file, from.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0) {
    H5Lmove(file, "/fuzz_swap", file, from.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    return false;
  }
  H5Lmove(file, "/fuzz_swap", file, to.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  return true;
}

// No operands. Makes every dataset's crc32c attribute and metadata_crc32c
// match the content again, as dmuon computes them, so that the ops before
// reach the checks behind the checksums.
bool op_fix_checksums(hid_t file, Bytes&) {
  bool changed = false;
  for (const std::string& path : objects(file).datasets) {
    Raw r;
    H5Id d(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d.valid() || H5Aexists(d, dmuon::ckpt::kCrcAttr) <= 0 || !read_raw(file, path, &r)) continue;
    // Created again as a scalar uint32, as dmuon writes it (an earlier op may have changed its shape).
    const uint32_t crc = dmuon::ckpt::crc32c(r.bytes.data(), r.bytes.size());
    changed |= put_attr(d, dmuon::ckpt::kCrcAttr, H5T_STD_U32LE, H5T_NATIVE_UINT32, &crc);
  }
  try {
    const uint32_t crc = dmuon::ckpt::metadata_crc(dmuon::ckpt::read_metadata_fields(file));
    changed |= put_attr(file, "metadata_crc32c", H5T_STD_U32LE, H5T_NATIVE_UINT32, &crc);
  } catch (const dmuon::Error&) {
    // Metadata that dmuon cannot read has no checksum to fix.
  }
  return changed;
}

using Op = bool (*)(hid_t, Bytes&);
constexpr Op kOps[] = {op_index_field, op_attr_value,     op_attr_retype, op_dataset_byte, op_dataset_recreate,
                       op_delete,      op_add,            op_rename,      op_fix_checksums};

}  // namespace

int apply_recipe(const std::string& path, const uint8_t* data, std::size_t size) {
  dmuon::ckpt::QuietHdf5 quiet;
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) return 0;
  Bytes b(data, size);
  int changed = 0;
  for (int i = 0; i < kMaxOps && !b.done(); ++i)
    changed += kOps[b.u8() % (sizeof kOps / sizeof kOps[0])](file, b) ? 1 : 0;
  file.close();
  return changed;
}

}  // namespace fuzz
