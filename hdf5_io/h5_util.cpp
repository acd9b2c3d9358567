#include "h5_util.hpp"

#include <vector>

#include "core/error.hpp"

namespace dmuon::ckpt {

QuietHdf5::QuietHdf5() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietHdf5::~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {
herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void* out) {
  // Walking downward, entry 0 is the API call and the last entry is where the
  // problem was found: keep the last description that says something.
  (void)n;
  if (err && err->desc && err->desc[0]) *static_cast<std::string*>(out) = err->desc;
  return 0;
}
}  // namespace

std::string hdf5_error_text() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, keep_innermost, &text);
  H5Eclear2(H5E_DEFAULT);
  return text;
}

void h5_require(bool ok, int status, const std::string& what) {
  if (ok) return;
  const std::string reason = hdf5_error_text();
  fail(status, reason.empty() ? what : what + " (HDF5: " + reason + ")");
}

namespace {
H5Id checked(hid_t id, H5Id::Closer closer, int status, const std::string& what) {
  h5_require(id >= 0, status, what);
  return H5Id(id, closer);
}
}  // namespace

H5Id h5_file(hid_t id, int status, const std::string& what) { return checked(id, H5Fclose, status, what); }
H5Id h5_dataset(hid_t id, int status, const std::string& what) { return checked(id, H5Dclose, status, what); }
H5Id h5_group(hid_t id, int status, const std::string& what) { return checked(id, H5Gclose, status, what); }
H5Id h5_space(hid_t id, int status, const std::string& what) { return checked(id, H5Sclose, status, what); }
H5Id h5_type(hid_t id, int status, const std::string& what) { return checked(id, H5Tclose, status, what); }
H5Id h5_plist(hid_t id, int status, const std::string& what) { return checked(id, H5Pclose, status, what); }

void write_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value) {
  const std::string what = "cannot write attribute '" + name + "'";
  H5Id space = h5_space(H5Screate(H5S_SCALAR), DMUON_ERR_IO, what);
  H5Id attr(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  h5_require(attr.valid(), DMUON_ERR_IO, what);
  h5_require(H5Awrite(attr, mem_type, value) >= 0, DMUON_ERR_IO, what);
  h5_require(attr.close(), DMUON_ERR_IO, what);
}

void write_attr_i64(hid_t obj, const std::string& name, int64_t v) {
  write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void write_attr_u64(hid_t obj, const std::string& name, uint64_t v) {
  write_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}
void write_attr_u32(hid_t obj, const std::string& name, uint32_t v) {
  write_attr(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &v);
}
void write_attr_i32(hid_t obj, const std::string& name, int32_t v) {
  write_attr(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &v);
}
void write_attr_f64(hid_t obj, const std::string& name, double v) {
  write_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

void write_attr_str(hid_t obj, const std::string& name, const std::string& v) {
  // Fixed-length, NUL-padded: readable by h5dump and h5py, and (unlike
  // variable-length strings) allowed everywhere in parallel HDF5.
  H5Id type = h5_type(H5Tcopy(H5T_C_S1), DMUON_ERR_IO, "cannot create a string type");
  H5Tset_size(type, v.empty() ? 1 : v.size());
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const char nul = 0;
  write_attr(obj, name, type, type, v.empty() ? &nul : v.data());
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

namespace {
H5Id open_attr(hid_t obj, const std::string& name, int status) {
  require(has_attr(obj, name), status, "attribute '" + name + "' is missing");
  H5Id attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  h5_require(attr.valid(), status, "cannot open attribute '" + name + "'");
  return attr;
}

template <class T>
T read_number(hid_t obj, const std::string& name, hid_t mem_type, H5T_class_t cls, int status) {
  H5Id attr = open_attr(obj, name, status);
  H5Id type = h5_type(H5Aget_type(attr), status, "cannot read the type of attribute '" + name + "'");
  require(H5Tget_class(type) == cls, status, "attribute '" + name + "' has the wrong type");
  H5Id space = h5_space(H5Aget_space(attr), status, "cannot read attribute '" + name + "'");
  require(H5Sget_simple_extent_npoints(space) == 1, status, "attribute '" + name + "' is not a scalar");
  T v{};
  h5_require(H5Aread(attr, mem_type, &v) >= 0, status, "cannot read attribute '" + name + "'");
  return v;
}
}  // namespace

int64_t read_attr_i64(hid_t obj, const std::string& name, int status) {
  return read_number<int64_t>(obj, name, H5T_NATIVE_INT64, H5T_INTEGER, status);
}
uint64_t read_attr_u64(hid_t obj, const std::string& name, int status) {
  return read_number<uint64_t>(obj, name, H5T_NATIVE_UINT64, H5T_INTEGER, status);
}
double read_attr_f64(hid_t obj, const std::string& name, int status) {
  return read_number<double>(obj, name, H5T_NATIVE_DOUBLE, H5T_FLOAT, status);
}

std::string read_attr_str(hid_t obj, const std::string& name, int status) {
  H5Id attr = open_attr(obj, name, status);
  H5Id type = h5_type(H5Aget_type(attr), status, "cannot read the type of attribute '" + name + "'");
  require(H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type), status,
          "attribute '" + name + "' is not a fixed-length string");
  const std::size_t size = H5Tget_size(type);
  std::vector<char> buf(size + 1, 0);
  h5_require(H5Aread(attr, type, buf.data()) >= 0, status, "cannot read attribute '" + name + "'");
  std::string s(buf.data(), size);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

}  // namespace dmuon::ckpt
