#include "core/options.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace dmuon {

namespace {

// The rules named in the `check` column of DMUON_OPTIONS_LIST: whether a
// value passes, and what the message says it must be.
bool passes_nonneg(double x) { return std::isfinite(x) && x >= 0; }
bool passes_unit(double x) { return x >= 0 && x < 1; }
bool passes_positive(double x) { return std::isfinite(x) && x > 0; }
bool passes_finite(double x) { return std::isfinite(x); }
bool passes_flag(int x) { return x == 0 || x == 1; }
bool passes_ns_steps(int x) { return x >= 1 && x <= 100; }
bool passes_ns_schedule(int x) { return x == DMUON_NS_QUINTIC || x == DMUON_NS_POLAR_EXPRESS; }
bool passes_muon_scale(int x) { return x == DMUON_SCALE_ORIGINAL || x == DMUON_SCALE_MATCH_ADAMW_RMS; }
bool passes_ns_symmetric(int x) {
  return x == DMUON_NS_SYMMETRIC_AUTO || x == DMUON_NS_SYMMETRIC_OFF || x == DMUON_NS_SYMMETRIC_GRAM || x == 2 || x == 4 ||
         x == 8;
}
bool passes_nonneg_int(int x) { return x >= 0; }
bool passes_any(const void*) { return true; }

constexpr const char* kRule_nonneg = "finite and >= 0";
constexpr const char* kRule_unit = "in [0, 1)";
constexpr const char* kRule_positive = "finite and > 0";
constexpr const char* kRule_finite = "finite";
constexpr const char* kRule_flag = "0 or 1";
constexpr const char* kRule_ns_steps = "1..100";
constexpr const char* kRule_ns_schedule = "a dmuon_ns_schedule_t";
constexpr const char* kRule_muon_scale = "a dmuon_muon_scale_t";
constexpr const char* kRule_ns_symmetric = "DMUON_NS_SYMMETRIC_AUTO (-1), DMUON_NS_SYMMETRIC_OFF (0), DMUON_NS_SYMMETRIC_GRAM (1), 2, 4 or 8";
constexpr const char* kRule_nonneg_int = ">= 0";
constexpr const char* kRule_any = "";

// The version-1 layout ended with cuda_stream, version 2 with restore_gather.
constexpr std::size_t kOptionsV1Size = offsetof(dmuon_options_t, cuda_stream) + sizeof(void*);
constexpr std::size_t kOptionsV2Size = offsetof(dmuon_options_t, restore_gather) + sizeof(int);

}  // namespace

void validate_options(const dmuon_options_t& o) {
#define DMUON_X_VALIDATE(type, name, value, check, saved, text) \
  require(passes_##check(o.name), DMUON_ERR_INVALID_VALUE, std::string(#name " must be ") + kRule_##check);
  DMUON_OPTIONS_LIST(DMUON_X_VALIDATE)
#undef DMUON_X_VALIDATE
}

std::size_t options_size_of_version(uint32_t v) {
  return v == 1 ? kOptionsV1Size : v == 2 ? kOptionsV2Size : sizeof(dmuon_options_t);
}

dmuon_options_t read_options(const dmuon_options_t* given, const char* call) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  if (!given) return o;
  require(given->magic == DMUON_OPTIONS_MAGIC, DMUON_ERR_OPTIONS_VERSION,
          std::string(call) + ": options were not initialised with DMUON_OPTIONS_INIT (magic)");
  require(given->version >= 1 && given->version <= DMUON_OPTIONS_VERSION, DMUON_ERR_OPTIONS_VERSION,
          std::string(call) + ": options version " + std::to_string(given->version) +
              (given->version > DMUON_OPTIONS_VERSION ? " is newer than this library's (" : " is not one of 1..") +
              std::to_string(DMUON_OPTIONS_VERSION) + (given->version > DMUON_OPTIONS_VERSION ? ")" : ""));
  const std::size_t expected = options_size_of_version(given->version);
  require(given->struct_size >= expected && given->struct_size <= sizeof(dmuon_options_t), DMUON_ERR_OPTIONS_VERSION,
          std::string(call) + ": options struct_size " + std::to_string(given->struct_size) + " does not fit version " +
              std::to_string(given->version) + " (" + std::to_string(expected) + " bytes; this library's struct has " +
              std::to_string(sizeof(dmuon_options_t)) + ")");
  std::memcpy(&o, given, expected);
  o.struct_size = sizeof o;
  o.version = DMUON_OPTIONS_VERSION;
  return o;
}

dmuon_checkpoint_options_t read_checkpoint_options(const dmuon_checkpoint_options_t* given, const char* call) {
  dmuon_checkpoint_options_t o = DMUON_CHECKPOINT_OPTIONS_INIT;
  if (!given) return o;
  require(given->magic == DMUON_OPTIONS_MAGIC && given->version >= 1 && given->version <= DMUON_OPTIONS_VERSION &&
              given->struct_size >= offsetof(dmuon_checkpoint_options_t, keep_last) + sizeof(int) &&
              given->struct_size <= sizeof(dmuon_checkpoint_options_t),
          DMUON_ERR_OPTIONS_VERSION,
          std::string(call) +
              ": options were not initialised with DMUON_CHECKPOINT_OPTIONS_INIT of this library's dmuon.h or an "
              "older one (magic, version " + std::to_string(given->version) + ", struct_size " +
              std::to_string(given->struct_size) + ")");
  std::memcpy(&o, given, given->struct_size);
  o.struct_size = sizeof o;
  return o;
}

}  // namespace dmuon
