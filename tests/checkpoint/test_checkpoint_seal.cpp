// The whole-file seal (hdf5_io/file_seal.hpp): damage that HDF5 would have to
// parse -- a flipped byte in its metadata (superblock, object headers), in the
// seal's user block, a truncated or extended file, the fuzzer's saved inputs
// that once crashed or misled HDF5 -- is refused before HDF5 opens the file,
// with DMUON_ERR_CHECKPOINT_CORRUPT, and the optimizer stays as it was. The
// header is also checked against docs/checkpoint-format.md ("Seal") by an
// independent parse here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ckpt_files.hpp"
#include "ckpt_model.hpp"
#include "crc32c.hpp"
#include "h5_inspect.hpp"

using namespace ckpt_test;
namespace fs = std::filesystem;

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

// The header as docs/checkpoint-format.md describes it, parsed here without
// dmuon's seal code; the body checksum recomputed over the whole file.
TEST(CheckpointSeal, HeaderFollowsTheDocumentedLayout) {
  ModelRun a(mixed_model());
  const std::string file = saved("layout", a);
  if (world_rank() != 0) return;
  const std::vector<unsigned char> bytes = read_all(file);
  ASSERT_GT(bytes.size(), 512u);
  auto u32 = [&](std::size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  uint64_t length;
  std::memcpy(&length, bytes.data() + 24, 8);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 16), "dmuon-ckpt-seal\n");
  EXPECT_EQ(u32(16), 1u);    // seal version
  EXPECT_EQ(u32(20), 512u);  // user block bytes
  EXPECT_EQ(length, bytes.size());
  EXPECT_EQ(u32(32), dmuon::ckpt::crc32c(bytes.data() + 512, bytes.size() - 512));
  for (std::size_t i = 36; i < 508; ++i) ASSERT_EQ(bytes[i], 0) << "byte " << i;
  EXPECT_EQ(u32(508), dmuon::ckpt::crc32c(bytes.data(), 508));
  // HDF5's own signature follows the user block.
  EXPECT_EQ(std::memcmp(bytes.data() + 512, "\x89HDF\r\n\x1a\n", 8), 0);
}

TEST(CheckpointSeal, FlippedByteInHdf5MetadataIsRefusedByTheSeal) {
  ModelRun a(mixed_model());
  const std::string file = saved("metadata", a);
  int64_t index_header = -1, root_header = -1;
  on_rank0([&] {
    index_header = object_header_address(file, "/index");
    root_header = object_header_address(file, "/");
  });
  MPI_Bcast(&index_header, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  MPI_Bcast(&root_header, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  ASSERT_GT(index_header, 512);
  ASSERT_GT(root_header, 512);
  // The superblock's signature and its end-of-file address field, the root
  // group's and /index's object headers: all HDF5 metadata, no dataset bytes.
  for (int64_t at : {int64_t{512}, int64_t{512 + 40}, root_header + 3, index_header + 3}) {
    SCOPED_TRACE("flipped byte at " + std::to_string(at));
    const std::string copy = file + ".flip_" + std::to_string(at);
    on_rank0([&] {
      ASSERT_TRUE(copy_file(file, copy));
      ASSERT_TRUE(flip_byte(copy, at));
    });
    expect_refused(copy, DMUON_ERR_CHECKPOINT_CORRUPT, "does not match the seal");
  }
}

TEST(CheckpointSeal, FlippedByteInTheUserBlockIsRefused) {
  ModelRun a(mixed_model());
  const std::string file = saved("userblock", a);
  // magic, version, user block size, length, body CRC, the zero area, the header's own CRC.
  const std::pair<int64_t, const char*> cases[] = {
      {0, "has no seal"},           {16, "seal header is damaged"}, {20, "seal header is damaged"},
      {25, "seal header is damaged"}, {33, "seal header is damaged"}, {300, "seal header is damaged"},
      {510, "seal header is damaged"}};
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

TEST(CheckpointSeal, TruncatedOrExtendedFilesAreRefused) {
  ModelRun a(mixed_model());
  const std::string file = saved("truncate", a);
  const int64_t size = file_size(file);
  ASSERT_GT(size, 4096);
  const std::pair<int64_t, const char*> cases[] = {
      {0, "too short to hold its seal"}, {511, "too short to hold its seal"}, {512, "its seal says"},
      {513, "its seal says"},            {size / 2, "its seal says"},        {size - 1, "its seal says"},
      {size + 1, "its seal says"}};
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
  const std::string newer = file + ".v2";
  on_rank0([&] {
    std::vector<unsigned char> bytes = read_all(file);
    const uint32_t version = 2;
    std::memcpy(bytes.data() + 16, &version, 4);
    const uint32_t self = dmuon::ckpt::crc32c(bytes.data(), 508);
    std::memcpy(bytes.data() + 508, &self, 4);
    std::ofstream(newer, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                 static_cast<std::streamsize>(bytes.size()));
  });
  expect_refused(newer, DMUON_ERR_NOT_SUPPORTED, "seal version 2");
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
