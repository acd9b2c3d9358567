#include "format.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"
#include "crc32c.hpp"
#include "h5_util.hpp"

namespace dmuon::ckpt {

const char* buffer_name(Buffer b) {
  switch (b) {
    case Buffer::param: return "param";
    case Buffer::momentum: return "momentum";
    case Buffer::exp_avg: return "exp_avg";
    case Buffer::master: return "master";
    default: return "exp_avg_sq";
  }
}

std::string dataset_path(Kind k, Dtype d, Buffer b) {
  return std::string("/") + kind_name(k) + "/" + dtype_name(d) + "/" + buffer_name(b);
}

bool stored_as_bf16(Dtype d, Buffer b) { return d == Dtype::bf16 && b == Buffer::param; }
hid_t file_type(Dtype d, Buffer b) { return stored_as_bf16(d, b) ? H5T_STD_U16LE : H5T_IEEE_F32LE; }
std::size_t element_size(Dtype d, Buffer b) { return stored_as_bf16(d, b) ? 2 : 4; }

// ------------------------------------------------------------------ index
hid_t index_file_type() {
  H5Id name = h5_type(H5Tcopy(H5T_C_S1), DMUON_ERR_IO, "cannot create the index name type");
  H5Tset_size(name, kIndexNameBytes);
  H5Tset_strpad(name, H5T_STR_NULLPAD);
  H5Tset_cset(name, H5T_CSET_UTF8);
  const hsize_t dims[1] = {kMaxDims};
  H5Id shape = h5_type(H5Tarray_create2(H5T_STD_I64LE, 1, dims), DMUON_ERR_IO, "cannot create the shape type");
  const hid_t t = H5Tcreate(H5T_COMPOUND, kIndexRowBytes);
  h5_require(t >= 0, DMUON_ERR_IO, "cannot create the index type");
  H5Tinsert(t, "name", 0, name);
  H5Tinsert(t, "kind", 256, H5T_STD_I32LE);
  H5Tinsert(t, "dtype", 260, H5T_STD_I32LE);
  H5Tinsert(t, "ndim", 264, H5T_STD_I32LE);
  H5Tinsert(t, "owner", 268, H5T_STD_I32LE);
  H5Tinsert(t, "shape", 272, shape);
  H5Tinsert(t, "numel", 336, H5T_STD_I64LE);
  H5Tinsert(t, "offset", 344, H5T_STD_I64LE);
  H5Tinsert(t, "lr_mul", 352, H5T_IEEE_F64LE);
  H5Tinsert(t, "wd_mul", 360, H5T_IEEE_F64LE);
  return t;
}

// The offsets above are those of row_fields below; the format is
// little-endian and so are the hosts dmuon supports (checked at build time).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checkpoint code assumes a little-endian host");

namespace {
// The packed row, one table for both directions: f(offset in the row, field, bytes).
// The name (offset 0, NUL-padded) is handled by the callers.
template <class Row, class F>
void row_fields(Row& r, F&& f) {
  f(256, &r.kind, 4);
  f(260, &r.dtype, 4);
  f(264, &r.ndim, 4);
  f(268, &r.owner, 4);
  f(272, r.shape.data(), 8 * kMaxDims);
  f(336, &r.numel, 8);
  f(344, &r.offset, 8);
  f(352, &r.lr_mul, 8);
  f(360, &r.wd_mul, 8);
}
}  // namespace

std::vector<unsigned char> pack_index(const std::vector<IndexRow>& rows) {
  std::vector<unsigned char> out(rows.size() * kIndexRowBytes, 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    unsigned char* p = out.data() + i * kIndexRowBytes;
    const IndexRow& r = rows[i];
    std::memcpy(p, r.name.data(), std::min(r.name.size(), kIndexNameBytes));
    row_fields(r, [p](std::size_t at, const void* v, std::size_t n) { std::memcpy(p + at, v, n); });
  }
  return out;
}

std::vector<IndexRow> unpack_index(const std::vector<unsigned char>& bytes) {
  std::vector<IndexRow> rows(bytes.size() / kIndexRowBytes);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const unsigned char* p = bytes.data() + i * kIndexRowBytes;
    IndexRow& r = rows[i];
    const char* name = reinterpret_cast<const char*>(p);
    r.name.assign(name, strnlen(name, kIndexNameBytes));
    row_fields(r, [p](std::size_t at, void* v, std::size_t n) { std::memcpy(v, p + at, n); });
  }
  return rows;
}

// ------------------------------------------------------------------ layout
Canonical canonical_layout(const std::vector<ParamRecord>& params) {
  Canonical c;
  c.offset.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamRecord& p = params[i];
    auto& total = (p.kind == Kind::muon ? c.muon_total : c.adam_total)[static_cast<std::size_t>(p.dtype)];
    c.offset[i] = total;
    total += p.numel;
    if (p.kind == Kind::adam) c.adam_params.push_back(static_cast<int>(i));
  }
  return c;
}

std::vector<IndexRow> index_rows(const std::vector<ParamRecord>& params, const Canonical& c) {
  std::vector<IndexRow> rows(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamRecord& p = params[i];
    IndexRow& r = rows[i];
    r.name = p.name;
    r.kind = static_cast<int32_t>(p.kind);
    r.dtype = static_cast<int32_t>(p.dtype);
    r.ndim = static_cast<int32_t>(p.shape.size());
    r.owner = p.owner;
    std::copy(p.shape.begin(), p.shape.end(), r.shape.begin());
    r.numel = p.numel;
    r.offset = c.offset[i];
    r.lr_mul = p.lr_mul;
    r.wd_mul = p.wd_mul;
  }
  return rows;
}

std::pair<int64_t, int64_t> even_share(int64_t total, int rank, int world) {
  // 128-bit products: total * rank may not fit 64 bits for huge models.
  const auto at = [&](int r) {
    return static_cast<int64_t>(static_cast<__int128>(total) * r / world);
  };
  return {at(rank), at(rank + 1)};
}

std::vector<Piece> muon_pieces(const std::vector<ParamRecord>& params, const Layout& layout, const Canonical& c,
                               Dtype d, int rank, bool momentum) {
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamRecord& p = params[i];
    if (p.kind != Kind::muon || p.dtype != d || p.owner != rank) continue;
    const int64_t mem = momentum ? layout.local_offset(p) : p.offset;
    pieces.push_back({c.offset[i], mem, p.numel});
  }
  return pieces;
}

std::vector<Piece> adam_pieces(const std::vector<ParamRecord>& params, const Canonical& c, Dtype d, int rank,
                               int world) {
  const auto [first, last] = even_share(c.adam_total[static_cast<std::size_t>(d)], rank, world);
  std::vector<Piece> pieces;
  for (int id : c.adam_params) {
    const ParamRecord& p = params[static_cast<std::size_t>(id)];
    if (p.dtype != d) continue;
    const int64_t lo = std::max(first, c.offset[static_cast<std::size_t>(id)]);
    const int64_t hi = std::min(last, c.offset[static_cast<std::size_t>(id)] + p.numel);
    if (lo < hi) pieces.push_back({lo, p.offset + (lo - c.offset[static_cast<std::size_t>(id)]), hi - lo});
  }
  return pieces;
}

std::vector<Piece> rank_pieces(const StateBuffer& b, const Plan& plan, const Canonical& c, int rank) {
  if (b.kind == Kind::muon) return muon_pieces(plan.params, plan.layout, c, b.dtype, rank, b.extent == Extent::own_segment);
  return adam_pieces(plan.params, c, b.dtype, rank, plan.world);
}

int64_t dataset_elements(const StateBuffer& b, const Canonical& c) {
  return (b.kind == Kind::muon ? c.muon_total : c.adam_total)[static_cast<std::size_t>(b.dtype)];
}

// ------------------------------------------------------------------ metadata
namespace {
// What the `saved` column of DMUON_OPTIONS_LIST says of an option.
enum class Saved { restored, kept, unsaved };
struct OptionField {
  const char* name;
  bool is_int;  // else a double (the unsaved pointer is never read)
  std::size_t offset;
  Saved saved;
};
constexpr OptionField kEveryOption[] = {
#define DMUON_X_FIELD(type, name, initial, check, saved, text) \
  {#name, std::is_same<type, int>::value, offsetof(dmuon_options_t, name), Saved::saved},
    DMUON_OPTIONS_LIST(DMUON_X_FIELD)
#undef DMUON_X_FIELD
};
// The stored ones, in the list's order (part of the metadata checksum).
const std::vector<OptionField>& stored_options() {
  static const std::vector<OptionField> fields = [] {
    std::vector<OptionField> v;
    for (const OptionField& f : kEveryOption)
      if (f.saved != Saved::unsaved) v.push_back(f);
    return v;
  }();
  return fields;
}

double& f64_field(dmuon_options_t& o, const OptionField& f) {
  return *reinterpret_cast<double*>(reinterpret_cast<char*>(&o) + f.offset);
}
int& int_field(dmuon_options_t& o, const OptionField& f) {
  return *reinterpret_cast<int*>(reinterpret_cast<char*>(&o) + f.offset);
}

// key '=' value '\n' with numbers in decimal and doubles as their IEEE-754
// bit pattern (exact, and the same in every language).
void append(std::string& s, const std::string& key, const std::string& value) {
  s += key;
  s += '=';
  s += value;
  s += '\n';
}
std::string bits(double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return std::to_string(u);
}
}  // namespace

void apply_restored_options(dmuon_options_t& into, const dmuon_options_t& saved) {
  for (const OptionField& f : stored_options()) {
    if (f.saved != Saved::restored) continue;
    if (f.is_int)
      int_field(into, f) = int_field(const_cast<dmuon_options_t&>(saved), f);
    else
      f64_field(into, f) = f64_field(const_cast<dmuon_options_t&>(saved), f);
  }
}

// ------------------------------------------------------------------ learning-rate schedules
namespace {
const char* const kScheduleGroups[2] = {"muon", "adam"};  // by dmuon_kind_t

// One schedule as its attributes, in a fixed order (part of the checksum).
struct ScheduleAttrs {
  std::vector<std::pair<std::string, int64_t>> ints;
  std::vector<std::pair<std::string, double>> reals;
};
ScheduleAttrs schedule_attrs(const LrSchedule& s, const std::string& group) {
  const dmuon_lr_schedule_t& x = s.spec;
  return {{{group + ".kind", x.kind},
           {group + ".warmup_steps", x.warmup_steps},
           {group + ".total_steps", x.total_steps},
           {group + ".step_size", x.step_size},
           {group + ".steps", s.steps}},
          {{group + ".base_lr", x.base_lr},
           {group + ".final_lr", x.final_lr},
           {group + ".power", x.power},
           {group + ".gamma", x.gamma}}};
}

void write_lr_schedules(hid_t file, hid_t gcpl, const Metadata& m) {
  H5Id g = h5_group(H5Gcreate2(file, kLrScheduleGroup, H5P_DEFAULT, gcpl, H5P_DEFAULT), DMUON_ERR_IO,
                    "cannot create /lr_schedule");
  for (int k = 0; k < 2; ++k) {
    if (!m.lr_schedules[static_cast<std::size_t>(k)]) continue;
    const ScheduleAttrs a = schedule_attrs(*m.lr_schedules[static_cast<std::size_t>(k)], kScheduleGroups[k]);
    for (const auto& [name, v] : a.ints) write_attr_i64(g, name, v);
    for (const auto& [name, v] : a.reals) write_attr_f64(g, name, v);
  }
}

// A group's schedule is there when its kind attribute is; its values must
// make a valid schedule, or the file is refused as damaged.
void read_lr_schedules(hid_t file, Metadata& m) {
  constexpr int bad = DMUON_ERR_CHECKPOINT_CORRUPT;
  m.has_lr_schedules = H5Lexists(file, kLrScheduleGroup, H5P_DEFAULT) > 0;
  if (!m.has_lr_schedules) return;
  H5Id g = h5_group(H5Gopen2(file, kLrScheduleGroup, H5P_DEFAULT), bad, "cannot open /lr_schedule");
  for (int k = 0; k < 2; ++k) {
    const std::string group = kScheduleGroups[k];
    if (!has_attr(g, group + ".kind")) continue;
    LrSchedule s;
    s.spec = dmuon_lr_schedule_t DMUON_LR_SCHEDULE_INIT;
    s.spec.kind = static_cast<int>(read_attr_i64(g, group + ".kind", bad));
    s.spec.warmup_steps = read_attr_i64(g, group + ".warmup_steps", bad);
    s.spec.total_steps = read_attr_i64(g, group + ".total_steps", bad);
    s.spec.step_size = read_attr_i64(g, group + ".step_size", bad);
    s.steps = read_attr_i64(g, group + ".steps", bad);
    s.spec.base_lr = read_attr_f64(g, group + ".base_lr", bad);
    s.spec.final_lr = read_attr_f64(g, group + ".final_lr", bad);
    s.spec.power = read_attr_f64(g, group + ".power", bad);
    s.spec.gamma = read_attr_f64(g, group + ".gamma", bad);
    try {
      validate_lr_schedule(s.spec, "/lr_schedule");
    } catch (const Error& e) {
      fail(bad, std::string("the saved learning-rate schedule is invalid: ") + e.what());
    }
    require(s.spec.base_lr >= 0 && s.steps >= 0, bad, "the saved " + group + " schedule has a negative base_lr or step");
    m.lr_schedules[static_cast<std::size_t>(k)] = s;
  }
}
}  // namespace

uint32_t metadata_crc(const Metadata& m) {
  std::string s;
  append(s, "format", kFormatName);
  append(s, "format_version", std::to_string(m.format_version));
  append(s, "library_version", m.library_version);
  append(s, "user_step", std::to_string(m.user_step));
  append(s, "optimizer_step", std::to_string(m.optimizer_step));
  append(s, "world_size", std::to_string(m.world_size));
  append(s, "model_hash", std::to_string(m.model_hash));
  append(s, "num_params", std::to_string(m.num_params));
  append(s, "kernel_choices", m.kernel_choices);
  dmuon_options_t o = m.options;
  for (const OptionField& f : stored_options())
    append(s, std::string("hyperparameters/") + f.name,
           f.is_int ? std::to_string(int_field(o, f)) : bits(f64_field(o, f)));
  for (const auto& [key, value] : m.user) append(s, "user_attributes/" + key, value);  // std::map: sorted bytes
  // Only present schedules add bytes, so the checksum of an older file is unchanged.
  for (int k = 0; k < 2; ++k) {
    if (!m.lr_schedules[static_cast<std::size_t>(k)]) continue;
    const ScheduleAttrs a = schedule_attrs(*m.lr_schedules[static_cast<std::size_t>(k)], kScheduleGroups[k]);
    for (const auto& [name, v] : a.ints) append(s, std::string("lr_schedule/") + name, std::to_string(v));
    for (const auto& [name, v] : a.reals) append(s, std::string("lr_schedule/") + name, bits(v));
  }
  return crc32c(s.data(), s.size());
}

void write_metadata(hid_t file, const Metadata& m) {
  write_attr_str(file, "format", kFormatName);
  write_attr_i64(file, "format_version", m.format_version);
  write_attr_str(file, "library_version", m.library_version);
  write_attr_i64(file, "user_step", m.user_step);
  write_attr_i64(file, "optimizer_step", m.optimizer_step);
  write_attr_i64(file, "world_size", m.world_size);
  write_attr_u64(file, "model_hash", m.model_hash);
  write_attr_i64(file, "num_params", m.num_params);
  write_attr_str(file, "kernel_choices", m.kernel_choices);
  write_attr_u32(file, "metadata_crc32c", metadata_crc(m));
  H5Id gcpl = h5_plist(H5Pcreate(H5P_GROUP_CREATE), DMUON_ERR_IO, "cannot create a group creation list");
  H5Pset_obj_track_times(gcpl, 0);  // reproducible file bytes, as for datasets
  H5Id hyper = h5_group(H5Gcreate2(file, kHyperGroup, H5P_DEFAULT, gcpl, H5P_DEFAULT), DMUON_ERR_IO,
                        "cannot create /hyperparameters");
  dmuon_options_t o = m.options;
  for (const OptionField& f : stored_options()) {
    if (f.is_int)
      write_attr_i64(hyper, f.name, int_field(o, f));
    else
      write_attr_f64(hyper, f.name, f64_field(o, f));
  }
  H5Id user = h5_group(H5Gcreate2(file, kUserGroup, H5P_DEFAULT, gcpl, H5P_DEFAULT), DMUON_ERR_IO,
                       "cannot create /user_attributes");
  for (const auto& [key, value] : m.user) write_attr_str(user, key, value);
  write_lr_schedules(file, gcpl, m);
}

namespace {
herr_t collect_attr_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
}  // namespace

Metadata read_metadata_fields(hid_t file) {
  constexpr int bad = DMUON_ERR_CHECKPOINT_CORRUPT;
  Metadata m;
  require(read_attr_str(file, "format", bad) == kFormatName, bad, "not a dmuon checkpoint (attribute 'format')");
  m.format_version = read_attr_i64(file, "format_version", bad);
  require(m.format_version >= 1, bad, "format_version " + std::to_string(m.format_version) + " is invalid");
  require(m.format_version <= kFormatVersion, DMUON_ERR_NOT_SUPPORTED,
          "checkpoint format version " + std::to_string(m.format_version) + " is newer than this library's (" +
              std::to_string(kFormatVersion) + ")");
  m.library_version = read_attr_str(file, "library_version", bad);
  m.user_step = read_attr_i64(file, "user_step", bad);
  m.optimizer_step = read_attr_i64(file, "optimizer_step", bad);
  m.world_size = read_attr_i64(file, "world_size", bad);
  m.model_hash = read_attr_u64(file, "model_hash", bad);
  m.num_params = read_attr_i64(file, "num_params", bad);
  m.kernel_choices = read_attr_str(file, "kernel_choices", bad);
  H5Id hyper = h5_group(H5Gopen2(file, kHyperGroup, H5P_DEFAULT), bad, "cannot open /hyperparameters");
  m.options = dmuon_options_t DMUON_OPTIONS_INIT;
  for (const OptionField& f : stored_options()) {
    if (f.is_int)
      int_field(m.options, f) = static_cast<int>(read_attr_i64(hyper, f.name, bad));
    else
      f64_field(m.options, f) = read_attr_f64(hyper, f.name, bad);
  }
  H5Id user = h5_group(H5Gopen2(file, kUserGroup, H5P_DEFAULT), bad, "cannot open /user_attributes");
  std::vector<std::string> keys;
  hsize_t at = 0;
  h5_require(H5Aiterate2(user, H5_INDEX_NAME, H5_ITER_INC, &at, collect_attr_name, &keys) >= 0, bad,
             "cannot list /user_attributes");
  for (const std::string& k : keys) m.user[k] = read_attr_str(user, k, bad);
  read_lr_schedules(file, m);
  return m;
}

Metadata read_metadata(hid_t file) {
  constexpr int bad = DMUON_ERR_CHECKPOINT_CORRUPT;
  const Metadata m = read_metadata_fields(file);
  const uint64_t stored = read_attr_u64(file, "metadata_crc32c", bad);
  require(stored == metadata_crc(m), bad, "the metadata checksum does not match (an attribute was altered)");
  return m;
}

}  // namespace dmuon::ckpt
