// Thin helpers over the HDF5 C API: owned identifiers, a guard that keeps
// HDF5 from printing its error stack (the library never prints), the text of
// HDF5's innermost error for our messages, and typed attribute access.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>

namespace dmuon::ckpt {

// An HDF5 identifier closed by the matching H5xclose when it goes out of scope.
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Close now and report whether HDF5 succeeded (a file's close is where the
  // last writes happen, so its result matters).
  bool close() {
    if (id_ < 0) return true;
    const herr_t rc = closer_(id_);
    id_ = H5I_INVALID_HID;
    return rc >= 0;
  }
  void reset() noexcept {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// While alive, HDF5 keeps its error stack to itself (restored afterwards, so
// an application that prints HDF5 errors for its own files keeps doing so).
class QuietHdf5 {
 public:
  QuietHdf5();
  ~QuietHdf5();
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The innermost message of HDF5's current error stack ("" when empty); clears it.
std::string hdf5_error_text();

// Throw Error(status, what + HDF5's reason) unless `ok`.
void h5_require(bool ok, int status, const std::string& what);

// Checked constructors of owned ids: a negative id throws with `status`.
H5Id h5_file(hid_t id, int status, const std::string& what);
H5Id h5_dataset(hid_t id, int status, const std::string& what);
H5Id h5_group(hid_t id, int status, const std::string& what);
H5Id h5_space(hid_t id, int status, const std::string& what);
H5Id h5_type(hid_t id, int status, const std::string& what);
H5Id h5_plist(hid_t id, int status, const std::string& what);

// Attributes on an object (group, dataset or file). Writers are collective in
// parallel HDF5: every rank must pass the same value. Readers throw `status`
// (typically DMUON_ERR_CHECKPOINT_CORRUPT) when the attribute is absent or of
// the wrong class.
void write_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* value);
void write_attr_i64(hid_t obj, const std::string& name, int64_t v);
void write_attr_u64(hid_t obj, const std::string& name, uint64_t v);
void write_attr_u32(hid_t obj, const std::string& name, uint32_t v);
void write_attr_i32(hid_t obj, const std::string& name, int32_t v);
void write_attr_f64(hid_t obj, const std::string& name, double v);
void write_attr_str(hid_t obj, const std::string& name, const std::string& v);

bool has_attr(hid_t obj, const std::string& name);
int64_t read_attr_i64(hid_t obj, const std::string& name, int status);
uint64_t read_attr_u64(hid_t obj, const std::string& name, int status);
double read_attr_f64(hid_t obj, const std::string& name, int status);
std::string read_attr_str(hid_t obj, const std::string& name, int status);

}  // namespace dmuon::ckpt
