// CRC-32C: the published check value, agreement with a bit-at-a-time
// definition, and the combination rule at many split points (what makes the
// stored checksums independent of the number of ranks).
#include <gtest/gtest.h>

#include <vector>

#include "crc32c.hpp"
#include "support/reference.hpp"

using dmuon::ckpt::crc32c;
using dmuon::ckpt::crc32c_combine;

namespace {

uint32_t bitwise_crc32c(const std::vector<unsigned char>& v) {
  uint32_t c = ~0u;
  for (unsigned char b : v) {
    c ^= b;
    for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
  }
  return ~c;
}

std::vector<unsigned char> bytes(std::size_t n) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(256 * (ref::noise(3, i, 0) + 1) / 2);
  return v;
}

TEST(Crc32c, CheckValue) { EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u); }

TEST(Crc32c, MatchesTheDefinitionAtEveryPathLength) {
  for (std::size_t n : {0, 1, 7, 8, 9, 1000, 24575, 24576, 24577, 100003}) {
    const auto v = bytes(n);
    EXPECT_EQ(crc32c(v.data(), v.size()), bitwise_crc32c(v)) << n;
  }
}

TEST(Crc32c, CombineEqualsTheWhole) {
  const auto v = bytes(200001);
  const uint32_t whole = crc32c(v.data(), v.size());
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{77777}, v.size()}) {
    const uint32_t a = crc32c(v.data(), cut), b = crc32c(v.data() + cut, v.size() - cut);
    EXPECT_EQ(crc32c_combine(a, b, v.size() - cut), whole) << cut;
    EXPECT_EQ(crc32c(v.data() + cut, v.size() - cut, a), whole) << cut;
  }
}

}  // namespace
