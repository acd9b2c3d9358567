// Data chunks written and read without HDF5's filter pipeline
// (hdf5_io/direct_chunks.hpp): dmuon's fletcher32 equals HDF5's bit for bit,
// summed in parts; a saved file's chunks are whole and HDF5 itself verifies
// and reads them; a model larger than one chunk, with chunks shared by two
// ranks and a zero tail in the last chunk, restores bitwise; a flipped byte
// in a chunk (in the data or in the tail) fails fletcher32 in dmuon's reader
// and in HDF5's.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <random>

#include "ckpt_files.hpp"
#include "ckpt_model.hpp"
#include "fletcher32.hpp"
#include "h5_compat.hpp"
#include "h5_inspect.hpp"

using namespace ckpt_test;

namespace {

// More than one 2^20-element chunk per dataset: 3 matrices of 700 x 700
// (1.47M elements; the second chunk starts inside the third matrix) and
// Adam vectors of 1.3M elements (the even split at 2 ranks falls inside
// chunk 0; chunk 1 ends 0.75M elements past the data).
std::vector<Spec> big_model() {
  return {
      {"m0", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {700, 700}},
      {"a0", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {500000}},
      {"m1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {700, 700}},
      {"a1", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {800000}},
      {"m2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {700, 700}},
      {"b0", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {64, 48}},
  };
}

int save(ModelRun& r, const std::string& dir, int64_t step) {
  return dmuon_checkpoint_save(r.opt, dir.c_str(), step, nullptr);
}

struct ChunkInfo {
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  unsigned mask = 0;
};

// Serial HDF5 views of a dataset: its chunk size and its chunks; whether H5Dread
// of the whole dataset (which checks every chunk's fletcher32) succeeds.
struct Dataset {
  hsize_t total = 0, chunk = 0;
  std::vector<ChunkInfo> chunks;
  bool reads = false;
  hsize_t user_block = 0;
};
Dataset inspect(const std::string& file, const std::string& path) {
  Dataset out;
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &func, &data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // a refused read is an expected outcome here
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f >= 0) {
    const hid_t fcpl = H5Fget_create_plist(f);
    H5Pget_userblock(fcpl, &out.user_block);
    H5Pclose(fcpl);
    const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
    if (d >= 0) {
      const hid_t s = H5Dget_space(d), dcpl = H5Dget_create_plist(d), type = H5Dget_type(d);
      H5Sget_simple_extent_dims(s, &out.total, nullptr);
      H5Pget_chunk(dcpl, 1, &out.chunk);
      for (hsize_t at = 0; out.chunk && at < out.total; at += out.chunk) {
        ChunkInfo c;
        hsize_t offset[1] = {at};
        H5Dget_chunk_info_by_coord(d, offset, &c.mask, &c.addr, &c.size);
        out.chunks.push_back(c);
      }
      std::vector<unsigned char> buf(out.total * H5Tget_size(type) + 1);
      out.reads = H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) >= 0;
      H5Tclose(type);
      H5Pclose(dcpl);
      H5Sclose(s);
      H5Dclose(d);
    }
    H5Fclose(f);
  }
  H5Eset_auto2(H5E_DEFAULT, func, data);
  return out;
}

const char* const kDataPaths[] = {"/muon/fp32/param", "/muon/fp32/momentum", "/muon/bf16/param",
                                  "/muon/bf16/momentum", "/adam/fp32/param", "/adam/fp32/exp_avg",
                                  "/adam/fp32/exp_avg_sq"};

}  // namespace

TEST(DirectChunks, Fletcher32MatchesHdf5InParts) {
  // Every rank on its own file: HDF5 writes chunks through its filter, dmuon
  // sums the stored chunk bytes in two parts split at a random even offset.
  const std::string file = "checkpoint_data/fletcher32_rank" + std::to_string(world_rank()) + ".h5";
  std::mt19937 rng(7 + static_cast<unsigned>(world_rank()));
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const hsize_t total = 1 + rng() % 200000, chunk = 1 + rng() % total;
    std::vector<uint32_t> v(total);
    for (auto& x : v) x = trial == 0 ? 0u : trial == 1 ? 0xFFFFFFFFu : static_cast<uint32_t>(rng());
    hid_t f = H5Fcreate(file.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hsize_t dims[1] = {total}, cdims[1] = {chunk};
    const hid_t space = H5Screate_simple(1, dims, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, cdims);
    H5Pset_fletcher32(dcpl);
    hid_t d = H5Dcreate2(f, "x", H5T_STD_U32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
    f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    d = H5Dopen2(f, "x", H5P_DEFAULT);
    const std::size_t bytes = chunk * 4;
    std::vector<unsigned char> raw(bytes + 4);
    for (hsize_t at = 0; at < total; at += chunk, ++checked) {
      const hsize_t offset[1] = {at};
      uint32_t mask = 0;
      ASSERT_GE(H5Dread_chunk(d, H5P_DEFAULT, offset, &mask, raw.data()), 0);
      uint32_t stored = 0;
      std::memcpy(&stored, raw.data() + bytes, 4);
      const std::size_t split = (rng() % (bytes / 2 + 1)) * 2;
      dmuon::ckpt::Fletcher32Part sum = dmuon::ckpt::fletcher32_part(raw.data(), split, 0, bytes);
      dmuon::ckpt::fletcher32_add(sum, dmuon::ckpt::fletcher32_part(raw.data() + split, bytes - split, split, bytes));
      EXPECT_EQ(dmuon::ckpt::fletcher32_value(sum), stored) << "trial " << trial << " chunk at " << at;
    }
    H5Dclose(d);
    H5Fclose(f);
  }
  EXPECT_GT(checked, 12);
}

TEST(DirectChunks, ChunksAreWholeHdf5VerifiesThemAndTheStateRestoresBitwise) {
  const std::string dir = fresh_dir("direct_whole");
  ModelRun a(big_model());
  a.step(0);
  a.step(1);
  ASSERT_EQ(save(a, dir, 2), DMUON_SUCCESS) << dmuon_context_last_error(a.ctx);
  on_rank0([&] {
    for (const char* path : kDataPaths) {
      const Dataset d = inspect(ckpt(dir, 2), path);
      ASSERT_GT(d.total, 0u) << path;
      EXPECT_TRUE(d.reads) << path << ": HDF5 refused the chunks dmuon wrote";
      const std::size_t elem = std::string(path) == "/muon/bf16/param" ? 2 : 4;
      for (const ChunkInfo& c : d.chunks) {
        EXPECT_NE(c.addr, HADDR_UNDEF) << path;
        EXPECT_EQ(c.size, d.chunk * elem + 4) << path;  // stored whole, with its checksum
        EXPECT_EQ(c.mask, 0u) << path;                  // fletcher32 applied
      }
    }
    // The model spans several chunks where the tests need it to.
    EXPECT_EQ(inspect(ckpt(dir, 2), "/muon/fp32/param").chunks.size(), 2u);
    EXPECT_EQ(inspect(ckpt(dir, 2), "/adam/fp32/exp_avg").chunks.size(), 2u);
  });
  ModelRun b(big_model(), 99);
  ASSERT_NE(first_difference(a.state(), b.state()), "");
  int64_t step = -1;
  ASSERT_EQ(dmuon_checkpoint_restore(b.opt, ckpt(dir, 2).c_str(), &step), DMUON_SUCCESS)
      << dmuon_context_last_error(b.ctx);
  EXPECT_EQ(step, 2);
  EXPECT_EQ(first_difference(a.state(), b.state()), "");
}

namespace {
// Flip the byte at `offset` past the start of chunk `k` of `path`, re-seal the
// file (so the damage reaches the chunk checks), and expect both HDF5 and
// dmuon to refuse the chunk, dmuon leaving the optimizer untouched.
void expect_chunk_refused(const std::string& name, const char* path, std::size_t k, int64_t offset) {
  const std::string dir = fresh_dir(name);
  ModelRun a(big_model());
  a.step(0);
  ASSERT_EQ(save(a, dir, 1), DMUON_SUCCESS) << dmuon_context_last_error(a.ctx);
  on_rank0([&] {
    const Dataset before = inspect(ckpt(dir, 1), path);
    ASSERT_TRUE(before.reads);
    ASSERT_LT(k, before.chunks.size());
    ASSERT_TRUE(flip_byte(ckpt(dir, 1), static_cast<int64_t>(dmuon::ckpt::h5_chunk_file_offset(before.chunks[k].addr, before.user_block)) + offset));
    ASSERT_TRUE(reseal(ckpt(dir, 1)));
    EXPECT_FALSE(inspect(ckpt(dir, 1), path).reads) << "HDF5 itself must refuse the damaged chunk";
  });
  ModelRun b(big_model(), 5);
  const State untouched = b.state();
  EXPECT_EQ(dmuon_checkpoint_restore(b.opt, ckpt(dir, 1).c_str(), nullptr), DMUON_ERR_CHECKPOINT_CORRUPT);
  const std::string message = dmuon_context_last_error(b.ctx);
  EXPECT_NE(message.find("fails its fletcher32 checksum"), std::string::npos) << message;  // dmuon's check, not HDF5's
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(first_difference(untouched, b.state()), "");
}
}  // namespace

TEST(DirectChunks, FlippedByteInsideADataChunkFailsFletcher32) {
  // Chunk 1 of the Muon momentum: written by whichever ranks own m1/m2.
  expect_chunk_refused("direct_flip_data", "/muon/fp32/momentum", 1, 12345);
}

TEST(DirectChunks, FlippedByteInTheZeroTailOfTheLastChunkFailsFletcher32) {
  // 1.3M Adam elements: chunk 1 holds 0.25M of them, then zeros.
  expect_chunk_refused("direct_flip_tail", "/adam/fp32/exp_avg_sq", 1, 4 * 600000 + 3);
}
