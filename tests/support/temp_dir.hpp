// A private directory under /tmp for a test's files, and its removal; both
// report failure through gtest, so a test that cannot make or remove its
// directory fails instead of reusing or leaving another's.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace dmuon_test {

// mkdtemp under /tmp/<prefix>_XXXXXX; empty (and a failed expectation) if it cannot.
inline std::string temp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  const char* d = mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr) << tmpl;
  return d ? std::string(d) : std::string();
}

inline void remove_tree(const std::string& dir) {
  EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0) << dir;
}

}  // namespace dmuon_test
