// Serial HDF5 access for tests (one rank): the crc32c attribute of every
// dataset, chunk addresses for corrupting a file on purpose, rewriting a
// value or an attribute through HDF5 (so fletcher32 stays valid).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format.hpp"

namespace ckpt_test {

// dataset path -> crc32c attribute, for every dataset in the file.
std::map<std::string, uint64_t> dataset_crcs(const std::string& file);
// File offset of the first chunk of a chunked dataset, user block included (-1 on failure).
int64_t first_chunk_address(const std::string& file, const std::string& dataset);
// Overwrite element `i` of a float32 dataset with `v` through HDF5.
bool rewrite_float(const std::string& file, const std::string& dataset, int64_t i, float v);
// Overwrite an int64 attribute of the root group.
bool rewrite_root_attr_i64(const std::string& file, const std::string& name, int64_t v);
// File offset of an object's header (HDF5 metadata), user block included (-1 on failure).
int64_t object_header_address(const std::string& file, const std::string& object);
// Write a fresh seal (hdf5_io/file_seal.hpp, version 2) over a file changed on
// purpose, so that a test reaches the checks behind the seal.
bool reseal(const std::string& file);
// Flip one byte of a file at `offset`.
bool flip_byte(const std::string& file, int64_t offset);
bool copy_file(const std::string& from, const std::string& to);
int64_t file_size(const std::string& file);
// The rows of a checkpoint's /index: the model that saved it, in its registration order (empty on failure).
std::vector<dmuon::ckpt::IndexRow> read_index(const std::string& file);

}  // namespace ckpt_test
