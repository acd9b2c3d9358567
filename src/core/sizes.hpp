// Limits and overflow-checked arithmetic for every size computed from a
// shape: element counts, bytes, padding, segment offsets, the checkpoint
// index. A shape whose own sizes cannot be represented is refused at
// registration (DMUON_ERR_INVALID_SHAPE); flat buffers that would grow past
// the limit when parameters are laid together are refused at finalize
// (DMUON_ERR_OUT_OF_MEMORY: no machine has that memory).
#pragma once
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dmuon {

// The most elements one flat buffer (and so one parameter) may hold: its
// fp32 optimizer state in bytes, padded to the parameter alignment, still
// fits int64_t, so no size derived from an accepted count wraps.
constexpr int64_t kMaxElements = INT64_MAX / 4 - 64;

inline int64_t checked_add(int64_t a, int64_t b, int status, const std::string& what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > kMaxElements) fail(status, what);
  return r;
}

inline int64_t checked_mul(int64_t a, int64_t b, int status, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > kMaxElements) fail(status, what);
  return r;
}

}  // namespace dmuon
