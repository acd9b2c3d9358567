// The restore fuzzer's structured mode: a recipe of edits applied through the
// HDF5 API to a copy of a valid checkpoint. HDF5 writes every byte of the
// result, so the file is well-formed HDF5 whatever the recipe says, and after
// re-sealing it reaches dmuon's own validation (the index, shapes, types,
// lengths, attributes, checksums) instead of stopping at the seal.
//
// Recipe bytes (any byte string is a recipe; a byte read past the end is 0):
//   op, then the op's operands, repeated, at most kMaxOps ops. The ops (op %
//   kNumOps) edit an /index field, an attribute's value or type, a dataset's
//   bytes, length, element type, rank or layout, delete, add or rename an
//   object, or recompute the checksums (every dataset's crc32c and
//   metadata_crc32c) so that later checks are reached. h5_recipe.cpp
//   documents each op's operands.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace fuzz {

constexpr int kMaxOps = 8;

// Apply the recipe to the HDF5 file `path` (serial HDF5, read-write). An op
// whose target does not exist, or that HDF5 refuses, changes nothing and the
// next op runs. Returns the number of ops that changed the file.
int apply_recipe(const std::string& path, const uint8_t* data, std::size_t size);

}  // namespace fuzz
