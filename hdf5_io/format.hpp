// The checkpoint file format (docs/checkpoint-format.md is its description
// for readers): names of groups, datasets and attributes, the parameter index,
// the canonical layout of the buffers, which slice of each dataset a rank
// handles, and the metadata with its checksum.
//
// Canonical means independent of the world size: every buffer is stored as
// one 1-D dataset per (kind, dtype) holding the parameters in registration
// order, end to end, without the alignment padding of the flat buffers and
// without the owner-major order of the Muon buffers.
#pragma once
#include <hdf5.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/lr_schedule.hpp"
#include "core/plan.hpp"
#include "core/state.hpp"
#include "include/hdf5_io/checkpoint.hpp"  // kReservedPrefix

namespace dmuon::ckpt {

constexpr const char* kFormatName = "dmuon-checkpoint";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kIndexPath = "/index";
constexpr const char* kAdamStepPath = "/adam/step";
constexpr const char* kHyperGroup = "/hyperparameters";
constexpr const char* kUserGroup = "/user_attributes";
// Learning-rate schedules: attributes "<group>.<field>" (group muon or adam).
// Written by every save, empty when no group has one; files written before
// schedules existed lack the group.
constexpr const char* kLrScheduleGroup = "/lr_schedule";
constexpr const char* kCrcAttr = "crc32c";
// Elements per chunk of a data dataset: 4 MiB of fp32, large enough that
// per-chunk costs vanish, small enough that fletcher32 localises damage.
constexpr int64_t kChunkElements = int64_t{1} << 20;

// A dataset holds one role of the state (core/state.hpp) for one (kind, dtype).
using Buffer = StateRole;
const char* buffer_name(Buffer b);
// "/muon/fp32/param", "/adam/bf16/exp_avg", ...
std::string dataset_path(Kind k, Dtype d, Buffer b);
// The element type a buffer has in the file: bf16 parameters are stored as
// their uint16 bit patterns, optimizer state is always float32.
bool stored_as_bf16(Dtype d, Buffer b);
hid_t file_type(Dtype d, Buffer b);  // H5T_IEEE_F32LE or H5T_STD_U16LE (not to be closed)
std::size_t element_size(Dtype d, Buffer b);

// One row of /index, packed little-endian exactly as stored (368 bytes).
struct IndexRow {
  std::string name;
  int32_t kind = 0, dtype = 0, ndim = 0, owner = -1;
  std::array<int64_t, kMaxDims> shape{};
  int64_t numel = 0, offset = 0;
  double lr_mul = 1.0, wd_mul = 1.0;
};
constexpr std::size_t kIndexNameBytes = 256;
constexpr std::size_t kIndexRowBytes = 368;
// The compound file type of /index (caller closes).
hid_t index_file_type();
std::vector<unsigned char> pack_index(const std::vector<IndexRow>& rows);
std::vector<IndexRow> unpack_index(const std::vector<unsigned char>& bytes);

// Canonical placement of a model: offset of every parameter in its
// (kind, dtype) dataset, dataset lengths, the Adam parameters in order.
struct Canonical {
  std::vector<int64_t> offset;                  // per parameter
  std::array<int64_t, kNumDtypes> muon_total{};  // elements per dtype
  std::array<int64_t, kNumDtypes> adam_total{};
  std::vector<int> adam_params;  // parameter ids, in registration order (= /adam/step order)
};
Canonical canonical_layout(const std::vector<ParamRecord>& params);
std::vector<IndexRow> index_rows(const std::vector<ParamRecord>& params, const Canonical& c);

// A run of elements moved between a dataset and memory (element units).
struct Piece {
  int64_t file;   // offset in the dataset
  int64_t mem;    // offset in the memory buffer
  int64_t count;
};

// Even split of `total` canonical elements: rank r handles [first, last).
std::pair<int64_t, int64_t> even_share(int64_t total, int rank, int world);
// Muon matrices of dtype d owned by `rank` (placement from plan_layout):
// mem indexes the flat parameter buffer, or this rank's momentum segment.
std::vector<Piece> muon_pieces(const std::vector<ParamRecord>& params, const Layout& layout, const Canonical& c,
                               Dtype d, int rank, bool momentum);
// This rank's even share of the Adam elements of dtype d; mem indexes the flat buffer.
std::vector<Piece> adam_pieces(const std::vector<ParamRecord>& params, const Canonical& c, Dtype d, int rank,
                               int world);
// The pieces of a state buffer that `rank` writes (and, for its own plan,
// reads): its Muon matrices, or its even share of a replicated buffer.
std::vector<Piece> rank_pieces(const StateBuffer& b, const Plan& plan, const Canonical& c, int rank);
// Elements of the buffer's dataset (0: the model has none of that kind and dtype).
int64_t dataset_elements(const StateBuffer& b, const Canonical& c);

// Everything stored as attributes, covered together by metadata_crc32c.
struct Metadata {
  int64_t format_version = kFormatVersion;
  std::string library_version;
  int64_t user_step = 0;
  int64_t optimizer_step = 0;
  int64_t world_size = 1;
  uint64_t model_hash = 0;
  int64_t num_params = 0;
  std::string kernel_choices;
  dmuon_options_t options{};
  std::map<std::string, std::string> user;
  bool has_lr_schedules = false;  // false: an older file, the restore keeps the caller's schedules
  std::array<std::optional<LrSchedule>, 2> lr_schedules;  // by dmuon_kind_t
};
// The hyper-parameters that a restore applies (the optimisation state: the
// options DMUON_OPTIONS_LIST marks `restored`); the others stay the caller's.
void apply_restored_options(dmuon_options_t& into, const dmuon_options_t& saved);
uint32_t metadata_crc(const Metadata& m);
// Collective in parallel HDF5: every rank passes the same metadata.
void write_metadata(hid_t file, const Metadata& m);
// Throws DMUON_ERR_CHECKPOINT_CORRUPT when missing or inconsistent,
// DMUON_ERR_NOT_SUPPORTED for a newer format version.
Metadata read_metadata(hid_t file);
// The same without comparing metadata_crc32c (for tools that re-checksum a
// file they changed on purpose, such as the fuzzer's structured mode).
Metadata read_metadata_fields(hid_t file);

}  // namespace dmuon::ckpt
