// The on-disk cache of Newton-Schulz kernel choices (CUDA backend), without a
// GPU: the versioned file name, the text format and its strict parser (a
// damaged file counts as absent), the atomic write, and where the directory
// comes from; the lanes DMUON_NS_SHAPE_LANES asks for.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_ns_tune.hpp"
#include "backends/cuda/ns_tuning_cache.hpp"
#include "support/temp_dir.hpp"

namespace {

using dmuon::NsCacheEntries;
using dmuon::NsCacheEntry;
using dmuon::NsCacheKey;

using dmuon_test::remove_tree;

std::string temp_dir() { return dmuon_test::temp_dir("dmuon_ns_cache"); }

NsCacheEntries sample() {
  NsCacheEntries e;
  e[NsCacheKey{4096, 4096, 1}] = NsCacheEntry{4, 4, 3.25, 2.5, {1, 0, 7}};
  e[NsCacheKey{768, 3072, 12}] = NsCacheEntry{0, 2, 1.125, 1.5, {0, 3, 0}};
  e[NsCacheKey{16384, 4096, 1}] = NsCacheEntry{0, 0, 9.5, 0};
  e[NsCacheKey{4096, 16384, 12}] = NsCacheEntry{dmuon::kNsGramBlocks, dmuon::kNsGramBlocks, 9.5, 6.25, {0, 0, 0}};
  return e;
}

bool same(const NsCacheEntries& a, const NsCacheEntries& b) {
  if (a.size() != b.size()) return false;
  for (const auto& kv : a) {
    auto it = b.find(kv.first);
    if (it == b.end() || it->second.blocks != kv.second.blocks ||
        it->second.best_symmetric_blocks != kv.second.best_symmetric_blocks ||
        std::abs(it->second.plain_ms - kv.second.plain_ms) > 1e-9 ||
        std::abs(it->second.symmetric_ms - kv.second.symmetric_ms) > 1e-9)
      return false;
    for (int r = 0; r < dmuon::kNsCacheAlgos; ++r)
      if (it->second.algo[r] != kv.second.algo[r]) return false;
  }
  return true;
}

TEST(NsTuningCache, FileNameCarriesFormatDeviceAndCublasVersion) {
  EXPECT_EQ(dmuon::ns_cache_file_name("NVIDIA H200", 9, 0, 132, 130100),
            "ns-tuning-v4-NVIDIA_H200-cc90-132sm-cublas130100.txt");
  // Anything outside [A-Za-z0-9._-] (a slash above all) becomes '_'.
  EXPECT_EQ(dmuon::ns_cache_file_name("a/b c*", 8, 6, 84, 1), "ns-tuning-v4-a_b_c_-cc86-84sm-cublas1.txt");
  EXPECT_EQ(dmuon::ns_cache_file_name("", 9, 0, 1, 1), "ns-tuning-v4-unknown-cc90-1sm-cublas1.txt");
}

TEST(NsTuningCache, FormatParsesBack) {
  const NsCacheEntries e = sample();
  const std::string text = dmuon::ns_cache_format(e);
  EXPECT_EQ(text.rfind("dmuon-ns-tuning v4\n", 0), 0u) << text;
  NsCacheEntries back;
  ASSERT_TRUE(dmuon::ns_cache_parse(text, back)) << text;
  EXPECT_TRUE(same(e, back)) << text;
  NsCacheEntries empty;
  ASSERT_TRUE(dmuon::ns_cache_parse(dmuon::ns_cache_format(empty), back));
  EXPECT_TRUE(back.empty());
}

TEST(NsTuningCache, DamagedTextIsRefusedWhole) {
  const std::string good = dmuon::ns_cache_format(sample());
  const std::vector<std::string> bad = {
      "",
      "dmuon-ns-tuning v4",                                         // no final newline
      "dmuon-ns-tuning v1\n",                                       // another format
      "dmuon-ns-tuning v2\n4096 4096 1 4 4 3.2 2.5 0 0 0\n",        // the format before Gram
      "dmuon-ns-tuning v3\n4096 4096 1 4 4 3.2 2.5 0 0 2\n",        // algorithms timed one call at a time
      "dmuon-ns-tuning v1\n4096 4096 1 4 4 3.2 2.5\n",              // version 1 lines
      "dmuon-ns-tuning v4\n4096 4096 1 4 4 3.2 2.5 0 0\n",          // a field missing
      "dmuon-ns-tuning v4\n4096 4096 1 4 4 3.2 2.5 0 0 0 7\n",      // one too many
      "dmuon-ns-tuning v4\n4096 4096 1 3 3 3.2 2.5 0 0 0\n",        // no such block count
      "dmuon-ns-tuning v4\n4096 4096 1 4 2 3.2 2.5 0 0 0\n",        // chose other than the best symmetric
      "dmuon-ns-tuning v4\n-4096 4096 1 4 4 3.2 2.5 0 0 0\n",       // negative
      "dmuon-ns-tuning v4\n4096 4096 0 4 4 3.2 2.5 0 0 0\n",        // no matrices
      "dmuon-ns-tuning v4\n4096 4096 1 4 4 nan 2.5 0 0 0\n",        // not a time
      "dmuon-ns-tuning v4\n4096 4096 1 4 4 3.2 2.5x 0 0 0\n",       // trailing junk
      "dmuon-ns-tuning v4\n4096 4096 1 4 4 3.2 2.5 0 -1 0\n",       // negative algorithm
      "dmuon-ns-tuning v4\n4096 4096 1 4 4 3.2 2.5 0 64 0\n",       // algorithm index out of range
      good.substr(0, good.size() - 5),                              // cut short
      std::string("dmuon-ns-tuning v4\n\x01\xff\x00 1 2", 25) + "\n",
  };
  for (const std::string& t : bad) {
    NsCacheEntries out;
    out[NsCacheKey{1, 1, 1}] = NsCacheEntry{};
    EXPECT_FALSE(dmuon::ns_cache_parse(t, out)) << t;
    EXPECT_TRUE(out.empty()) << t;
  }
}

TEST(NsTuningCache, WriteIsAtomicAndCreatesTheDirectory) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/a/b/" + dmuon::ns_cache_file_name("dev", 9, 0, 132, 1);
  std::string why;
  ASSERT_TRUE(dmuon::ns_cache_write(path, sample(), why)) << why;
  NsCacheEntries back;
  ASSERT_TRUE(dmuon::ns_cache_read(path, back));
  EXPECT_TRUE(same(sample(), back));
  // Overwrite with fewer entries: the file is replaced whole.
  NsCacheEntries one;
  one[NsCacheKey{2048, 2048, 12}] = NsCacheEntry{2, 2, 4.0, 3.0};
  ASSERT_TRUE(dmuon::ns_cache_write(path, one, why)) << why;
  ASSERT_TRUE(dmuon::ns_cache_read(path, back));
  EXPECT_TRUE(same(one, back));
  // No temporary file stays behind.
  const std::string listing = dir + "/a/b";
  std::FILE* ls = popen(("ls -A " + listing).c_str(), "r");
  ASSERT_NE(ls, nullptr);
  char line[512];
  int files = 0;
  while (std::fgets(line, sizeof line, ls)) {
    ++files;
    EXPECT_EQ(std::string(line).find(".tmp."), std::string::npos) << line;
  }
  pclose(ls);
  EXPECT_EQ(files, 1);
  remove_tree(dir);
}

TEST(NsTuningCache, UnwritableOrMissingIsReportedNotThrown) {
  const std::string dir = temp_dir();
  const std::string blocker = dir + "/file";
  std::ofstream(blocker) << "x";
  std::string why;
  EXPECT_FALSE(dmuon::ns_cache_write(blocker + "/sub/cache.txt", sample(), why));
  EXPECT_FALSE(why.empty());
  NsCacheEntries out;
  EXPECT_FALSE(dmuon::ns_cache_read(dir + "/absent.txt", out));
  EXPECT_FALSE(dmuon::ns_cache_read(blocker, out));  // exists, but not a cache
  EXPECT_TRUE(out.empty());
  remove_tree(dir);
}

TEST(NsTuningCache, DirectoryFromEnvironment) {
  const char* keep[3] = {std::getenv("DMUON_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string saved[3] = {keep[0] ? keep[0] : "", keep[1] ? keep[1] : "", keep[2] ? keep[2] : ""};
  setenv("DMUON_CACHE_DIR", "/x/own", 1);
  setenv("XDG_CACHE_HOME", "/x/xdg", 1);
  setenv("HOME", "/x/home", 1);
  EXPECT_EQ(dmuon::ns_cache_dir_from_environment(), "/x/own");
  unsetenv("DMUON_CACHE_DIR");
  EXPECT_EQ(dmuon::ns_cache_dir_from_environment(), "/x/xdg/dmuon");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(dmuon::ns_cache_dir_from_environment(), "/x/home/.cache/dmuon");
  unsetenv("HOME");
  EXPECT_EQ(dmuon::ns_cache_dir_from_environment(), "");
  const char* names[3] = {"DMUON_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i)
    if (keep[i]) setenv(names[i], saved[i].c_str(), 1);
}

// A count within 1..kNsMaxShapeLanes is taken (1: one order); anything else
// keeps the default lanes.
TEST(NsTuneConfig, ShapeLanesFromEnvironment) {
  const char* keep = std::getenv("DMUON_NS_SHAPE_LANES");
  const std::string saved = keep ? keep : "";
  unsetenv("DMUON_NS_SHAPE_LANES");
  EXPECT_EQ(dmuon::NsTuneConfig::from_environment().shape_lanes, dmuon::kNsDefaultShapeLanes);
  EXPECT_GT(dmuon::kNsDefaultShapeLanes, 1) << "lanes are on by default";
  setenv("DMUON_NS_SHAPE_LANES", "1", 1);
  EXPECT_EQ(dmuon::NsTuneConfig::from_environment().shape_lanes, 1);
  setenv("DMUON_NS_SHAPE_LANES", "2", 1);
  EXPECT_EQ(dmuon::NsTuneConfig::from_environment().shape_lanes, 2);
  setenv("DMUON_NS_SHAPE_LANES", std::to_string(dmuon::kNsMaxShapeLanes).c_str(), 1);
  EXPECT_EQ(dmuon::NsTuneConfig::from_environment().shape_lanes, dmuon::kNsMaxShapeLanes);
  for (const char* bad : {"0", "-2", "4x", "", "lots", "9999999999999999999"}) {
    setenv("DMUON_NS_SHAPE_LANES", bad, 1);
    EXPECT_EQ(dmuon::NsTuneConfig::from_environment().shape_lanes, dmuon::kNsDefaultShapeLanes) << "'" << bad << "'";
  }
  setenv("DMUON_NS_SHAPE_LANES", std::to_string(dmuon::kNsMaxShapeLanes + 1).c_str(), 1);
  EXPECT_EQ(dmuon::NsTuneConfig::from_environment().shape_lanes, dmuon::kNsDefaultShapeLanes);
  if (keep)
    setenv("DMUON_NS_SHAPE_LANES", saved.c_str(), 1);
  else
    unsetenv("DMUON_NS_SHAPE_LANES");
}

}  // namespace
