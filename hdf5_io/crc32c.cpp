#include "crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace dmuon::ckpt {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // Castagnoli polynomial, bit-reflected

// Eight 256-entry tables: table[k][b] is the CRC contribution of byte b
// followed by k zero bytes, so the portable path consumes 8 bytes per round.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  }
};
const Tables& tables() {
  static const Tables tables;
  return tables;
}

uint32_t crc_portable(const unsigned char* p, std::size_t n, uint32_t c) {
  const auto& t = tables().t;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian hosts only (as is the file format)
    w ^= c;
    c = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
        t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xffu];
  return c;
}

#if defined(__x86_64__)
// Three independent streams hide the 3-cycle latency of the crc32 instruction;
// the streams are joined with crc32c_combine's shift operator.
__attribute__((target("sse4.2"))) uint32_t crc_sse42_serial(const unsigned char* p, std::size_t n, uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
#endif

// Multiply a(x) b(x) modulo the polynomial, in the reflected bit order.
uint32_t multmod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

// x^(8 * len) modulo the polynomial: the operator that appends len zero bytes.
uint32_t shift_operator(uint64_t len) {
  static const std::array<uint32_t, 64> powers = [] {
    std::array<uint32_t, 64> p{};
    p[0] = 1u << 30;  // x^1 (reflected: bit 31 is x^0)
    for (int k = 1; k < 64; ++k) p[k] = multmod(p[k - 1], p[k - 1]);  // x^(2^k)
    return p;
  }();
  uint32_t result = 1u << 31;  // x^0
  uint64_t bits = len * 8;
  for (int k = 0; bits; ++k, bits >>= 1)
    if (bits & 1u) result = multmod(powers[static_cast<std::size_t>(k)], result);
  return result;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_sse42(const unsigned char* p, std::size_t n, uint32_t c) {
  constexpr std::size_t kBlock = 8192;  // bytes per stream per round
  if (n < 3 * kBlock) return crc_sse42_serial(p, n, c);
  static const uint32_t shift_block = shift_operator(kBlock);
  while (n >= 3 * kBlock) {
    uint64_t a = c, b = 0, d = 0;
    const unsigned char* pa = p;
    const unsigned char* pb = p + kBlock;
    const unsigned char* pd = p + 2 * kBlock;
    for (std::size_t i = 0; i < kBlock; i += 8) {
      uint64_t wa, wb, wd;
      std::memcpy(&wa, pa + i, 8);
      std::memcpy(&wb, pb + i, 8);
      std::memcpy(&wd, pd + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      d = _mm_crc32_u64(d, wd);
    }
    // Raw (not inverted) register states: appending a block multiplies by x^(8*kBlock).
    c = multmod(shift_block, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    c = multmod(shift_block, c) ^ static_cast<uint32_t>(d);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  return crc_sse42_serial(p, n, c);
}

bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, std::size_t len, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (have_sse42()) return ~crc_sse42(p, len, c);
#endif
  return ~crc_portable(p, len, c);
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // The pre/post inversions cancel for the combined value: shifting crc_a by
  // len_b zero bytes and adding crc_b gives the CRC of the concatenation.
  return multmod(shift_operator(len_b), crc_a) ^ crc_b;
}

}  // namespace dmuon::ckpt
