// The seal (hdf5_io/file_seal.hpp): damage that HDF5 would have to parse -- a
// flipped byte in its metadata (superblock, object headers), in the seal's
// header or extent list, a truncated or extended file, an extent list that
// points outside the file or overlaps, the fuzzer's saved inputs that once
// crashed or misled HDF5 -- is refused before HDF5 opens the file; damage
// inside a data chunk (which the seal leaves out) is refused by fletcher32.
// All with DMUON_ERR_CHECKPOINT_CORRUPT, and the optimizer stays as it was.
// The header is also checked against docs/checkpoint-format.md ("Seal") by an
// independent parse here, and a version-1 seal (whole file) still verifies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "ckpt_files.hpp"
#include "ckpt_model.hpp"
#include "crc32c.hpp"
#include "h5_inspect.hpp"

using namespace ckpt_test;
namespace fs = std::filesystem;
using dmuon::ckpt::crc32c;

namespace {

std::string fresh(const std::string& name) { return fresh_dir("seal_" + name); }

// A saved checkpoint of the mixed model after one step, in its own directory.
std::string saved(const std::string& name, ModelRun& a) {
  const std::string dir = fresh(name);
  a.step(0);
  EXPECT_EQ(dmuon_checkpoint_save(a.opt, dir.c_str(), 1, nullptr), DMUON_SUCCESS) << dmuon_context_last_error(a.ctx);
  return ckpt(dir, 1);
}

std::vector<unsigned char> read_all(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& file, const std::vector<unsigned char>& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

uint32_t u32(const std::vector<unsigned char>& b, std::size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
uint64_t u64(const std::vector<unsigned char>& b, std::size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
template <class T>
void put(std::vector<unsigned char>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

struct Extent {
  uint64_t offset, length;
};

// The extent list as the format page describes it.
std::vector<Extent> extents_of(const std::vector<unsigned char>& b) {
  std::vector<Extent> e(u32(b, 36));
  for (std::size_t i = 0; i < e.size(); ++i) e[i] = {u64(b, 64 + 16 * i), u64(b, 64 + 16 * i + 8)};
  return e;
}

// Replace the extent list and make both of the header's own CRCs valid again
// (the seal's body CRC is left as it was: the list must be refused first).
void rewrite_list(std::vector<unsigned char>& b, const std::vector<Extent>& e) {
  const uint32_t block = u32(b, 20);
  std::fill(b.begin() + 64, b.begin() + block, 0);
  put<uint32_t>(b, 36, static_cast<uint32_t>(e.size()));
  for (std::size_t i = 0; i < e.size() && 64 + 16 * i + 16 <= block; ++i) {
    put<uint64_t>(b, 64 + 16 * i, e[i].offset);
    put<uint64_t>(b, 64 + 16 * i + 8, e[i].length);
  }
  put<uint32_t>(b, 40, crc32c(b.data() + 64, block - 64));
  put<uint32_t>(b, 60, crc32c(b.data(), 60));
}

// Restoring `path` into a fresh run gives `status`, a message containing
// `needle` on every rank, and leaves the run's state exactly as it was.
void expect_refused(const std::string& path, int status, const std::string& needle) {
  ModelRun b(mixed_model(), 2);
  const ckpt_test::State before = b.state();
  int64_t step = -7;
  EXPECT_EQ(dmuon_checkpoint_restore(b.opt, path.c_str(), &step), status) << dmuon_context_last_error(b.ctx);
  const std::string message = dmuon_context_last_error(b.ctx);
  EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message << " (wanted '" << needle << "')";
  EXPECT_NE(message.find(path), std::string::npos) << "message does not name the file: " << message;
  EXPECT_EQ(step, -7);
  EXPECT_EQ(first_difference(before, b.state()), "");
}

// A copy of `file` named after `tag`, changed by `edit` on rank 0.
std::string edited(const std::string& file, const std::string& tag,
                   const std::function<void(std::vector<unsigned char>&)>& edit) {
  const std::string copy = file + "." + tag;
  on_rank0([&] {
    std::vector<unsigned char> bytes = read_all(file);
    edit(bytes);
    write_all(copy, bytes);
  });
  return copy;
}

int64_t bcast(int64_t v) {
  MPI_Bcast(&v, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return v;
}

// The header as docs/checkpoint-format.md describes it, parsed here without
// dmuon's seal code; the covered bytes' checksum recomputed here.
TEST(CheckpointSeal, HeaderFollowsTheDocumentedLayout) {
  ModelRun a(mixed_model());
  const std::string file = saved("layout", a);
  if (world_rank() != 0) return;
  const std::vector<unsigned char> b = read_all(file);
  ASSERT_GT(b.size(), 512u);
  const uint32_t block = u32(b, 20);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 16), "dmuon-ckpt-seal\n");
  EXPECT_EQ(u32(b, 16), 2u);  // seal version
  ASSERT_GE(block, 512u);
  ASSERT_EQ(block & (block - 1), 0u) << "user block not a power of two";
  ASSERT_LT(block, b.size());
  EXPECT_EQ(u64(b, 24), b.size());
  for (std::size_t i = 44; i < 60; ++i) ASSERT_EQ(b[i], 0) << "byte " << i;
  EXPECT_EQ(u32(b, 60), crc32c(b.data(), 60));
  EXPECT_EQ(u32(b, 40), crc32c(b.data() + 64, block - 64));
  const std::vector<Extent> ext = extents_of(b);
  ASSERT_FALSE(ext.empty());
  ASSERT_LE(64 + 16 * ext.size(), block);
  for (std::size_t i = 64 + 16 * ext.size(); i < block; ++i) ASSERT_EQ(b[i], 0) << "byte " << i;
  // Sorted, merged (a gap between neighbours), inside [block, length).
  uint64_t end = block, left_out = 0;
  uint32_t crc = 0;
  for (const Extent& e : ext) {
    ASSERT_GT(e.length, 0u);
    ASSERT_GT(e.offset, end);
    ASSERT_LE(e.offset + e.length, b.size());
    crc = crc32c(b.data() + end, e.offset - end, crc);
    end = e.offset + e.length;
    left_out += e.length;
  }
  crc = crc32c(b.data() + end, b.size() - end, crc);
  EXPECT_EQ(u32(b, 32), crc);
  // The extents are the data chunks: the first chunk of every data dataset
  // starts an extent or lies inside one; /index and /adam/step stay covered.
  for (const char* d : {"/muon/fp32/param", "/muon/fp32/momentum", "/muon/bf16/param", "/adam/fp32/exp_avg_sq",
                        "/adam/bf16/param", "/index", "/adam/step"}) {
    const int64_t at = first_chunk_address(file, d);
    ASSERT_GT(at, static_cast<int64_t>(block)) << d;
    const bool inside = std::any_of(ext.begin(), ext.end(), [&](const Extent& e) {
      return static_cast<uint64_t>(at) >= e.offset && static_cast<uint64_t>(at) < e.offset + e.length;
    });
    const bool data = std::string(d) != "/index" && std::string(d) != "/adam/step";
    EXPECT_EQ(inside, data) << d;
  }
  EXPECT_GT(left_out, 0u);
  // HDF5's own signature follows the user block.
  EXPECT_EQ(std::memcmp(b.data() + block, "\x89HDF\r\n\x1a\n", 8), 0);
}

TEST(CheckpointSeal, FlippedByteInHdf5MetadataIsRefusedByTheSeal) {
  ModelRun a(mixed_model());
  const std::string file = saved("metadata", a);
  int64_t index_header = -1, root_header = -1, block = 0;
  on_rank0([&] {
    index_header = object_header_address(file, "/index");
    root_header = object_header_address(file, "/");
    block = u32(read_all(file), 20);
  });
  index_header = bcast(index_header);
  root_header = bcast(root_header);
  block = bcast(block);
  ASSERT_GT(index_header, block);
  ASSERT_GT(root_header, block);
  // The superblock's signature and its end-of-file address field, the root
  // group's and /index's object headers: all HDF5 metadata, no dataset bytes.
  for (int64_t at : {block, block + 40, root_header + 3, index_header + 3}) {
    SCOPED_TRACE("flipped byte at " + std::to_string(at));
    const std::string copy = file + ".flip_" + std::to_string(at);
    on_rank0([&] {
      ASSERT_TRUE(copy_file(file, copy));
      ASSERT_TRUE(flip_byte(copy, at));
    });
    expect_refused(copy, DMUON_ERR_CHECKPOINT_CORRUPT, "does not match the seal");
  }
}

// The seal leaves data chunks out: a flip there passes the seal, reaches
// HDF5's parser through intact metadata only, and fletcher32 refuses it.
TEST(CheckpointSeal, FlippedByteInADataChunkIsRefusedByFletcher32) {
  ModelRun a(mixed_model());
  const std::string file = saved("chunk", a);
  for (const char* d : {"/muon/fp32/param", "/adam/fp32/exp_avg", "/adam/bf16/param"}) {
    SCOPED_TRACE(d);
    int64_t at = -1;
    on_rank0([&] { at = first_chunk_address(file, d); });
    at = bcast(at);
    ASSERT_GT(at, 512);
    const std::string copy = file + ".chunk_" + std::to_string(at);
    on_rank0([&] {
      ASSERT_TRUE(copy_file(file, copy));
      ASSERT_TRUE(flip_byte(copy, at + 5));
    });
    expect_refused(copy, DMUON_ERR_CHECKPOINT_CORRUPT, "fletcher32");
  }
}

TEST(CheckpointSeal, FlippedByteInTheUserBlockIsRefused) {
  ModelRun a(mixed_model());
  const std::string file = saved("userblock", a);
  int64_t block = 0;
  on_rank0([&] { block = u32(read_all(file), 20); });
  block = bcast(block);
  // magic; version, block size, length, body CRC, count, list CRC, the zero
  // field, the header's own CRC; an extent's offset and length; the padding.
  const std::pair<int64_t, const char*> cases[] = {
      {0, "has no seal"},
      {16, "seal header is damaged"},
      {20, "seal header is damaged"},
      {25, "seal header is damaged"},
      {33, "seal header is damaged"},
      {36, "seal header is damaged"},
      {41, "seal header is damaged"},
      {50, "seal header is damaged"},
      {61, "seal header is damaged"},
      {66, "extent list is damaged"},
      {64 + 9, "extent list is damaged"},
      {block - 2, "extent list is damaged"}};
  for (const auto& [at, needle] : cases) {
    SCOPED_TRACE("flipped byte at " + std::to_string(at));
    const std::string copy = file + ".flip_" + std::to_string(at);
    on_rank0([&] {
      ASSERT_TRUE(copy_file(file, copy));
      ASSERT_TRUE(flip_byte(copy, at));
    });
    expect_refused(copy, DMUON_ERR_CHECKPOINT_CORRUPT, needle);
  }
}

// Lists whose own checksums are right but whose extents are not possible.
TEST(CheckpointSeal, ExtentListsOutsideTheFileOrOverlappingAreRefused) {
  ModelRun a(mixed_model());
  const std::string file = saved("extents", a);
  const int64_t size = bcast(world_rank() == 0 ? file_size(file) : 0);
  using Edit = std::function<void(std::vector<Extent>&, uint32_t)>;
  const std::tuple<const char*, Edit, const char*> cases[] = {
      {"past_eof", [&](std::vector<Extent>& e, uint32_t) { e.back().length = static_cast<uint64_t>(size) + 1 - e.back().offset; },
       "lies outside the file"},
      {"far_past_eof", [&](std::vector<Extent>& e, uint32_t) { e.back().offset = uint64_t{1} << 62; },
       "lies outside the file"},
      {"wraps", [&](std::vector<Extent>& e, uint32_t) { e.back().length = ~uint64_t{0} - 8; },
       "lies outside the file"},
      {"overlap", [&](std::vector<Extent>& e, uint32_t) { e.push_back({e.back().offset + 1, 8}); }, "overlaps"},
      {"unsorted", [&](std::vector<Extent>& e, uint32_t) { e.insert(e.begin(), e.back()); }, "out of order"},
      {"in_user_block", [&](std::vector<Extent>& e, uint32_t block) { e.insert(e.begin(), {block - 8, 4}); },
       "starts inside the user block"},
      {"empty", [&](std::vector<Extent>& e, uint32_t) { e.back().length = 0; }, "is empty"},
      {"whole_file", [&](std::vector<Extent>& e, uint32_t block) { e = {{block, static_cast<uint64_t>(size) - block}}; },
       "does not match the seal"},  // nothing left to check but nothing: the body CRC differs
  };
  for (const auto& [tag, edit, needle] : cases) {
    SCOPED_TRACE(tag);
    const std::string copy = edited(file, tag, [&, edit = edit](std::vector<unsigned char>& b) {
      std::vector<Extent> e = extents_of(b);
      edit(e, u32(b, 20));
      rewrite_list(b, e);
    });
    expect_refused(copy, DMUON_ERR_CHECKPOINT_CORRUPT, needle);
  }
  // More extents than the user block holds (count raised, header CRC fixed).
  const std::string many = edited(file, "count", [](std::vector<unsigned char>& b) {
    put<uint32_t>(b, 36, u32(b, 20) / 16);
    put<uint32_t>(b, 60, crc32c(b.data(), 60));
  });
  expect_refused(many, DMUON_ERR_CHECKPOINT_CORRUPT, "more than its user block");
}

TEST(CheckpointSeal, TruncatedOrExtendedFilesAreRefused) {
  ModelRun a(mixed_model());
  const std::string file = saved("truncate", a);
  const int64_t size = bcast(world_rank() == 0 ? file_size(file) : 0);
  const int64_t chunk = bcast(world_rank() == 0 ? first_chunk_address(file, "/muon/fp32/param") : 0);
  ASSERT_GT(size, 4096);
  const std::pair<int64_t, const char*> cases[] = {
      {0, "too short to hold its seal"}, {511, "too short to hold its seal"}, {512, "its seal says"},
      {513, "its seal says"},            {chunk + 10, "its seal says"},      {size / 2, "its seal says"},
      {size - 1, "its seal says"},       {size + 1, "its seal says"}};
  for (const auto& [at, needle] : cases) {
    SCOPED_TRACE("cut at " + std::to_string(at) + " of " + std::to_string(size));
    const std::string cut = file + ".cut_" + std::to_string(at);
    on_rank0([&] {
      ASSERT_TRUE(copy_file(file, cut));
      ASSERT_EQ(::truncate(cut.c_str(), at), 0);  // beyond the end: extended with zeros
    });
    expect_refused(cut, DMUON_ERR_CHECKPOINT_CORRUPT, needle);
  }
}

TEST(CheckpointSeal, ANewerSealVersionIsNotSupported) {
  ModelRun a(mixed_model());
  const std::string file = saved("version", a);
  const std::string newer = edited(file, "v3", [](std::vector<unsigned char>& b) {
    put<uint32_t>(b, 16, 3);
    put<uint32_t>(b, 60, crc32c(b.data(), 60));
  });
  expect_refused(newer, DMUON_ERR_NOT_SUPPORTED, "seal version 3");
}

// Files sealed by earlier versions of dmuon (version 1: a 512-byte user block
// and the CRC-32C of every byte after it) still restore, and still refuse damage.
TEST(CheckpointSeal, AVersion1SealStillVerifies) {
  ModelRun a(mixed_model());
  const std::string file = saved("v1", a);
  int64_t block = 0;
  on_rank0([&] { block = u32(read_all(file), 20); });
  if (bcast(block) != 512) GTEST_SKIP() << "this model's user block is not 512 bytes";
  const std::string v1 = edited(file, "v1.h5", [](std::vector<unsigned char>& b) {
    std::fill(b.begin() + 16, b.begin() + 512, 0);
    put<uint32_t>(b, 16, 1);
    put<uint32_t>(b, 20, 512);
    put<uint64_t>(b, 24, b.size());
    put<uint32_t>(b, 32, crc32c(b.data() + 512, b.size() - 512));
    put<uint32_t>(b, 508, crc32c(b.data(), 508));
  });
  ModelRun b(mixed_model(), 2);
  int64_t step = -1;
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, v1.c_str(), &step), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(first_difference(a.state(), b.state()), "");
  // Version 1 covers the data too: a flipped data byte fails the seal itself.
  const int64_t chunk = bcast(world_rank() == 0 ? first_chunk_address(v1, "/muon/fp32/param") : 0);
  const std::string damaged = v1 + ".flip";
  on_rank0([&] {
    ASSERT_TRUE(copy_file(v1, damaged));
    ASSERT_TRUE(flip_byte(damaged, chunk + 5));
  });
  expect_refused(damaged, DMUON_ERR_CHECKPOINT_CORRUPT, "does not match the seal");
}

TEST(CheckpointSeal, DirectoryRestoreFallsBackPastAFileTheSealRefuses) {
  const std::string dir = fresh("fallback");
  ModelRun a(mixed_model());
  a.step(0);
  ASSERT_EQ(dmuon_checkpoint_save(a.opt, dir.c_str(), 1, nullptr), DMUON_SUCCESS);
  const ckpt_test::State at1 = a.state();
  a.step(1);
  ASSERT_EQ(dmuon_checkpoint_save(a.opt, dir.c_str(), 2, nullptr), DMUON_SUCCESS);
  on_rank0([&] { ASSERT_TRUE(flip_byte(ckpt(dir, 2), object_header_address(ckpt(dir, 2), "/index") + 3)); });
  ModelRun b(mixed_model(), 2);
  int64_t step = -1;
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, dir.c_str(), &step), DMUON_SUCCESS) << dmuon_context_last_error(b.ctx);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(first_difference(at1, b.state()), "");
  EXPECT_NE(b.attribute("dmuon.fallback").find("ckpt_2.h5"), std::string::npos) << b.attribute("dmuon.fallback");
  EXPECT_NE(b.attribute("dmuon.fallback").find("does not match the seal"), std::string::npos)
      << b.attribute("dmuon.fallback");
}

// Every input the fuzzer keeps in fuzz/regressions/ (unsealed files that once
// crashed HDF5 1.10.8 or made it misbehave) is refused before HDF5 sees it.
TEST(CheckpointSeal, FuzzRegressionInputsAreRefused) {
  std::vector<std::string> inputs;
  for (const auto& e : fs::directory_iterator(DMUON_FUZZ_REGRESSIONS)) inputs.push_back(e.path().string());
  ASSERT_FALSE(inputs.empty());
  std::sort(inputs.begin(), inputs.end());
  const std::string dir = fresh("regressions");
  for (const std::string& input : inputs) {
    SCOPED_TRACE(input);
    const std::string copy = dir + "/" + fs::path(input).filename().string();
    on_rank0([&] { ASSERT_TRUE(copy_file(input, copy)); });
    expect_refused(copy, DMUON_ERR_CHECKPOINT_CORRUPT, "seal");
  }
}

}  // namespace
