// dmuon-ckpt: look into dmuon checkpoint files without the program that
// wrote them (docs/checkpoint-format.md describes what it reads).
//
//   dmuon-ckpt list FILE           metadata, schedules, user attributes, parameters
//   dmuon-ckpt verify FILE         seal, metadata checksum, every dataset read
//                                  (fletcher32) and its crc32c compared
//   dmuon-ckpt diff FILE_A FILE_B  metadata and values, per parameter and buffer
//   dmuon-ckpt export FILE OUT.npz parameters and optimizer state as NumPy arrays
//
// Exit status: 0 done (verify: sound; diff: identical), 1 damaged or
// different, 2 wrong usage or a file that cannot be read.
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "crc32c.hpp"
#include "file_seal.hpp"
#include "format.hpp"
#include "h5_compat.hpp"
#include "h5_util.hpp"
#include "npz_writer.hpp"

using namespace dmuon;
using namespace dmuon::ckpt;

namespace {

H5Id open_file(const std::string& path) {
  return h5_file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), DMUON_ERR_IO, "cannot open '" + path + "'");
}

bool exists(hid_t file, const std::string& path) {
  // Each link on the way must exist: test the parents first.
  for (std::size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    if (H5Lexists(file, path.substr(0, at).c_str(), H5P_DEFAULT) <= 0) return false;
  return H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0;
}

// The raw bytes of a whole dataset, in its file type (read through HDF5, so
// its fletcher32 is checked), and its element size.
std::vector<unsigned char> read_raw(hid_t file, const std::string& path, std::size_t& element) {
  constexpr int bad = DMUON_ERR_CHECKPOINT_CORRUPT;
  H5Id d = h5_dataset(H5Dopen2(file, path.c_str(), H5P_DEFAULT), bad, "cannot open " + path);
  H5Id type = h5_type(H5Dget_type(d), bad, "cannot read the type of " + path);
  H5Id space = h5_space(H5Dget_space(d), bad, "cannot read the extent of " + path);
  element = H5Tget_size(type);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  require(n >= 0, bad, "cannot read the extent of " + path);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * element);
  if (n > 0) h5_require(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0, bad, "reading " + path);
  return bytes;
}

std::vector<IndexRow> read_index_rows(hid_t file) {
  std::size_t element = 0;
  const std::vector<unsigned char> raw = read_raw(file, kIndexPath, element);
  require(element == kIndexRowBytes, DMUON_ERR_CHECKPOINT_CORRUPT, "/index rows are not " + std::to_string(kIndexRowBytes) + " bytes");
  return unpack_index(raw);
}

// One buffer of one parameter as float32 values (bf16 widened exactly).
std::vector<float> param_values(hid_t file, const IndexRow& row, Buffer b) {
  const auto kind = static_cast<Kind>(row.kind);
  const auto dtype = static_cast<Dtype>(row.dtype);
  const std::string path = dataset_path(kind, dtype, b);
  std::size_t element = 0;
  const std::vector<unsigned char> raw = read_raw(file, path, element);
  require(static_cast<std::size_t>(row.offset + row.numel) * element <= raw.size(), DMUON_ERR_CHECKPOINT_CORRUPT,
          row.name + " lies outside " + path);
  std::vector<float> out(static_cast<std::size_t>(row.numel));
  const unsigned char* at = raw.data() + static_cast<std::size_t>(row.offset) * element;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (stored_as_bf16(dtype, b)) {
      uint16_t bits;
      std::memcpy(&bits, at + 2 * i, 2);
      out[i] = bf16_to_float(bits);
    } else {
      std::memcpy(&out[i], at + 4 * i, 4);
    }
  }
  return out;
}

// The buffers a file stores for a parameter: master weights only when it
// was saved with the option (bf16 parameters).
std::vector<Buffer> buffers_of(hid_t file, const IndexRow& row) {
  const Kind kind = static_cast<Kind>(row.kind);
  std::vector<Buffer> out = kind == Kind::muon ? std::vector<Buffer>{Buffer::param, Buffer::momentum}
                                               : std::vector<Buffer>{Buffer::param, Buffer::exp_avg, Buffer::exp_avg_sq};
  if (exists(file, dataset_path(kind, static_cast<Dtype>(row.dtype), Buffer::master))) out.push_back(Buffer::master);
  return out;
}

std::string shape_text(const IndexRow& row) {
  std::string s;
  for (int k = 0; k < row.ndim; ++k) s += (k ? "x" : "") + std::to_string(row.shape[static_cast<std::size_t>(k)]);
  return s;
}

int list(const std::string& path) {
  H5Id file = open_file(path);
  const Metadata m = read_metadata_fields(file);
  std::printf("file %s\nformat_version %lld  library %s\nuser_step %lld  optimizer_step %lld  world_size %lld\n",
              path.c_str(), static_cast<long long>(m.format_version), m.library_version.c_str(),
              static_cast<long long>(m.user_step), static_cast<long long>(m.optimizer_step),
              static_cast<long long>(m.world_size));
  std::printf("adam_lr %.9g  muon_lr %.9g  max_grad_norm %.9g\n", m.options.adam_lr, m.options.muon_lr,
              m.options.max_grad_norm);
  const char* groups[2] = {"muon", "adam"};
  for (int k = 0; k < 2; ++k)
    if (const auto& s = m.lr_schedules[static_cast<std::size_t>(k)])
      std::printf("lr_schedule %s: kind %d base_lr %.9g warmup %lld total %lld final_lr %.9g steps %lld\n", groups[k],
                  s->spec.kind, s->spec.base_lr, static_cast<long long>(s->spec.warmup_steps),
                  static_cast<long long>(s->spec.total_steps), s->spec.final_lr, static_cast<long long>(s->steps));
  for (const auto& [key, value] : m.user) std::printf("attribute %s = %s\n", key.c_str(), value.c_str());
  for (const IndexRow& r : read_index_rows(file))
    std::printf("param %-32s %-4s %-4s %-12s %lld elements\n", r.name.c_str(),
                static_cast<Kind>(r.kind) == Kind::muon ? "muon" : "adam", dtype_name(static_cast<Dtype>(r.dtype)),
                shape_text(r).c_str(), static_cast<long long>(r.numel));
  return 0;
}

herr_t collect_dataset(hid_t, const char* name, const H5ObjectInfo* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  return 0;
}

int verify(const std::string& path) {
  verify_seal(MPI_COMM_SELF, path);
  H5Id file = open_file(path);
  read_metadata(file);  // checks metadata_crc32c
  std::vector<std::string> datasets;
  h5_require(h5_visit(file, collect_dataset, &datasets, H5O_INFO_BASIC) >= 0, DMUON_ERR_CHECKPOINT_CORRUPT,
             "cannot list the datasets");
  for (const std::string& d : datasets) {
    std::size_t element = 0;
    const std::vector<unsigned char> raw = read_raw(file, d, element);
    H5Id dset = h5_dataset(H5Dopen2(file, d.c_str(), H5P_DEFAULT), DMUON_ERR_CHECKPOINT_CORRUPT, "cannot open " + d);
    if (!has_attr(dset, kCrcAttr)) continue;
    const uint64_t stored = read_attr_u64(dset, kCrcAttr, DMUON_ERR_CHECKPOINT_CORRUPT);
    require(stored == crc32c(raw.data(), raw.size()), DMUON_ERR_CHECKPOINT_CORRUPT, d + ": the crc32c does not match");
  }
  std::printf("%s: sound (seal, metadata checksum, %zu datasets read with fletcher32 and crc32c)\n", path.c_str(),
              datasets.size());
  return 0;
}

int diff(const std::string& a_path, const std::string& b_path) {
  H5Id a = open_file(a_path), b = open_file(b_path);
  const Metadata ma = read_metadata_fields(a), mb = read_metadata_fields(b);
  int differences = 0;
  const auto note = [&](const std::string& what) {
    std::printf("%s\n", what.c_str());
    ++differences;
  };
  if (ma.user_step != mb.user_step) note("user_step " + std::to_string(ma.user_step) + " != " + std::to_string(mb.user_step));
  if (ma.optimizer_step != mb.optimizer_step)
    note("optimizer_step " + std::to_string(ma.optimizer_step) + " != " + std::to_string(mb.optimizer_step));
  std::map<std::string, IndexRow> rows_b;
  for (const IndexRow& r : read_index_rows(b)) rows_b[r.name] = r;
  for (const IndexRow& r : read_index_rows(a)) {
    const auto it = rows_b.find(r.name);
    if (it == rows_b.end()) {
      note("param " + r.name + ": only in " + a_path);
      continue;
    }
    const IndexRow& o = it->second;
    if (o.kind != r.kind || o.dtype != r.dtype || o.shape != r.shape) {
      note("param " + r.name + ": kind, dtype or shape differ");
    } else {
      const std::vector<Buffer> in_b = buffers_of(b, o);
      if (buffers_of(a, r) != in_b) note("param " + r.name + ": master weights in one file only");
      for (Buffer buf : buffers_of(a, r)) {
        if (std::find(in_b.begin(), in_b.end(), buf) == in_b.end()) continue;
        const std::vector<float> x = param_values(a, r, buf), y = param_values(b, o, buf);
        double worst = 0;
        for (std::size_t i = 0; i < x.size(); ++i)
          if (std::memcmp(&x[i], &y[i], 4) != 0) worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])) + 1e-300);
        if (worst > 0) {
          char text[64];
          std::snprintf(text, sizeof text, "%.6g", worst);
          note("param " + r.name + " " + buffer_name(buf) + ": max |a - b| " + text);
        }
      }
    }
    rows_b.erase(it);
  }
  for (const auto& [name, row] : rows_b) note("param " + name + ": only in " + b_path);
  if (!differences) std::printf("identical parameters and optimizer state\n");
  return differences ? 1 : 0;
}

int export_npz(const std::string& path, const std::string& out) {
  H5Id file = open_file(path);
  const Metadata m = read_metadata(file);
  const std::vector<IndexRow> rows = read_index_rows(file);
  NpzWriter npz(out);
  std::vector<int64_t> adam_steps;
  if (exists(file, kAdamStepPath)) {
    std::size_t element = 0;
    const std::vector<unsigned char> raw = read_raw(file, kAdamStepPath, element);
    adam_steps.resize(raw.size() / 8);
    std::memcpy(adam_steps.data(), raw.data(), adam_steps.size() * 8);
  }
  std::size_t adam_index = 0;
  for (const IndexRow& r : rows) {
    const std::vector<int64_t> shape(r.shape.begin(), r.shape.begin() + r.ndim);
    for (Buffer buf : buffers_of(file, r)) {
      const std::vector<float> v = param_values(file, r, buf);
      const std::string name = buf == Buffer::param ? r.name : r.name + "." + buffer_name(buf);
      npz.add(name, "<f4", shape, v.data(), v.size() * 4);
    }
    if (static_cast<Kind>(r.kind) == Kind::adam && adam_index < adam_steps.size())
      npz.add(r.name + ".step", "<i8", {}, &adam_steps[adam_index++], 8);
  }
  const int64_t steps[2] = {m.user_step, m.optimizer_step};
  npz.add("dmuon.user_step", "<i8", {}, &steps[0], 8);
  npz.add("dmuon.optimizer_step", "<i8", {}, &steps[1], 8);
  npz.close();
  std::printf("%s: %zu parameters written to %s\n", path.c_str(), rows.size(), out.c_str());
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: dmuon-ckpt list FILE | verify FILE | diff FILE_A FILE_B | export FILE OUT.npz\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 2;
  {
    const QuietHdf5 quiet;
    const std::vector<std::string> a(argv + 1, argv + argc);
    try {
      if (a.size() == 2 && a[0] == "list") rc = list(a[1]);
      else if (a.size() == 2 && a[0] == "verify") rc = verify(a[1]);
      else if (a.size() == 3 && a[0] == "diff") rc = diff(a[1], a[2]);
      else if (a.size() == 3 && a[0] == "export") rc = export_npz(a[1], a[2]);
      else rc = usage();
    } catch (const Error& e) {
      std::fprintf(stderr, "dmuon-ckpt: %s\n", e.what());
      rc = (e.status() == DMUON_ERR_CHECKPOINT_CORRUPT) ? 1 : 2;
    }
  }
  MPI_Finalize();
  return rc;
}
