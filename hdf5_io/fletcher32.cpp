#include "fletcher32.hpp"

#include <algorithm>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace dmuon::ckpt {
namespace {

constexpr uint64_t kMod = 65535;
constexpr std::size_t kLanes = 16;
// Words per lane between folds into 64 bits: the lane's weighted sum grows
// like rounds^2 / 2 * 65535 and must stay below 2^32.
constexpr std::size_t kRounds = 256;

// Sums of n words (n a multiple of kLanes): s1 = sum w_i and, weighting each
// word by its distance to the end of the run, s2 = sum (n - i) w_i.
// Lane j holds the words j, j + 16, ...; per lane the classic running sums
// (a += w; b += a) give the same weights in units of 16 words, and the
// per-lane offset j is subtracted at the end.
void finish_lanes(const uint64_t* a64, const uint64_t* b64, uint64_t& s1, uint64_t& s2) {
  s1 = 0;
  s2 = 0;
  for (std::size_t j = 0; j < kLanes; ++j) {
    s1 += a64[j];
    // Word i = 16 t + j sits 16 (rounds after t, t included) - j words before the end.
    s2 += kLanes * b64[j] - j * a64[j];
  }
}

// One block of `rounds` rounds (at most kRounds): per-lane sums in 32 bits.
#if defined(__x86_64__)
// SSE2 (every x86-64): 16 words a round as four vectors of 32-bit lanes.
void block_lanes(const unsigned char* q, std::size_t rounds, uint32_t* la, uint32_t* lb) {
  const __m128i zero = _mm_setzero_si128();
  __m128i a[4] = {zero, zero, zero, zero}, b[4] = {zero, zero, zero, zero};
  for (std::size_t r = 0; r < rounds; ++r, q += 2 * kLanes) {
    for (int h = 0; h < 2; ++h) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h));
      v = _mm_or_si128(_mm_slli_epi16(v, 8), _mm_srli_epi16(v, 8));  // big-endian words
      a[2 * h] = _mm_add_epi32(a[2 * h], _mm_unpacklo_epi16(v, zero));
      a[2 * h + 1] = _mm_add_epi32(a[2 * h + 1], _mm_unpackhi_epi16(v, zero));
      b[2 * h] = _mm_add_epi32(b[2 * h], a[2 * h]);
      b[2 * h + 1] = _mm_add_epi32(b[2 * h + 1], a[2 * h + 1]);
    }
  }
  for (int v = 0; v < 4; ++v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(la + 4 * v), a[v]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lb + 4 * v), b[v]);
  }
}
#else
void block_lanes(const unsigned char* q, std::size_t rounds, uint32_t* la, uint32_t* lb) {
  for (std::size_t j = 0; j < kLanes; ++j) la[j] = lb[j] = 0;
  for (std::size_t r = 0; r < rounds; ++r, q += 2 * kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      la[j] += static_cast<uint32_t>(q[2 * j]) << 8 | q[2 * j + 1];  // big-endian words
      lb[j] += la[j];
    }
}
#endif

void sum_lanes(const unsigned char* p, std::size_t n, uint64_t& s1, uint64_t& s2) {
  uint64_t a64[kLanes] = {}, b64[kLanes] = {};
  for (std::size_t done = 0; done < n;) {
    const std::size_t rounds = std::min((n - done) / kLanes, kRounds);
    uint32_t la[kLanes], lb[kLanes];
    block_lanes(p + 2 * done, rounds, la, lb);
    // This block's b weights count its own rounds; every round after it adds
    // one more to each of its words.
    const uint64_t rest = (n - done) / kLanes - rounds;
    for (std::size_t j = 0; j < kLanes; ++j) {
      b64[j] += lb[j] + rest * la[j];
      a64[j] += la[j];
    }
    done += rounds * kLanes;
  }
  finish_lanes(a64, b64, s1, s2);
}

}  // namespace

Fletcher32Part fletcher32_part(const void* data, std::size_t len, uint64_t pos, uint64_t chunk_bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  Fletcher32Part out;
  // Runs of at most 2^20 words keep every 64-bit sum far from overflow.
  constexpr std::size_t kRun = std::size_t{1} << 21;
  for (std::size_t at = 0; at < len; at += kRun) {
    const std::size_t bytes = len - at < kRun ? len - at : kRun;
    const std::size_t words = bytes / 2, body = words / kLanes * kLanes;
    uint64_t s1 = 0, s2 = 0;
    if (body) sum_lanes(p + at, body, s1, s2);
    s2 += (words - body) * s1;  // the tail words come after the body
    // The tail words: weight by distance to the end of this run.
    for (std::size_t i = body; i < words; ++i) {
      const uint64_t w = (uint64_t{p[at + 2 * i]} << 8) | p[at + 2 * i + 1];
      s1 += w;
      s2 += (words - i) * w;
    }
    // In the chunk, every word of this run also sits `after` words before the chunk's end.
    const uint64_t after = (chunk_bytes - (pos + at + bytes)) / 2;
    const uint64_t part2 = (s2 % kMod + (after % kMod) * (s1 % kMod)) % kMod;
    out.sum1 = (out.sum1 + s1 % kMod) % kMod;
    out.sum2 = (out.sum2 + part2) % kMod;
    if (s1) out.nonzero = 1;
  }
  return out;
}

void fletcher32_add(Fletcher32Part& into, const Fletcher32Part& part) {
  into.sum1 = (into.sum1 + part.sum1) % kMod;
  into.sum2 = (into.sum2 + part.sum2) % kMod;
  into.nonzero |= part.nonzero;
}

uint32_t fletcher32_value(const Fletcher32Part& whole) {
  // HDF5 folds its sums into 16 bits with end-around carries, which maps a
  // nonzero multiple of 65535 to 0xFFFF and only an all-zero input to 0.
  if (!whole.nonzero) return 0;
  const uint32_t s1 = whole.sum1 % kMod ? static_cast<uint32_t>(whole.sum1 % kMod) : 0xFFFFu;
  const uint32_t s2 = whole.sum2 % kMod ? static_cast<uint32_t>(whole.sum2 % kMod) : 0xFFFFu;
  return (s2 << 16) | s1;
}

}  // namespace dmuon::ckpt
