// HDF5's fletcher32 chunk checksum, computed by dmuon so that every rank can
// checksum only the bytes of a chunk it holds (checkpoint data chunks are
// written and read without HDF5's filter pipeline; docs/checkpoint-format.md).
//
// HDF5 (H5checksum.c, H5_checksum_fletcher32) reads the chunk as big-endian
// 16-bit words w_0 .. w_{N-1} and forms, modulo 65535,
//   sum1 = w_0 + ... + w_{N-1},   sum2 = N*w_0 + (N-1)*w_1 + ... + 1*w_{N-1},
// with the residue 0 written as 0xFFFF unless every word is zero; the filter
// (H5Zfletcher32.c) stores (sum2 << 16 | sum1) as 4 little-endian bytes after
// the chunk. Both sums are linear in the words, so the bytes of one chunk can
// be summed in pieces, on any ranks, and the parts added.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dmuon::ckpt {

// A part of one chunk's sums: residues modulo 65535, and whether any word was nonzero.
struct Fletcher32Part {
  uint64_t sum1 = 0;
  uint64_t sum2 = 0;
  uint64_t nonzero = 0;  // 0 or 1 (a uint64 so parts travel as one MPI array)
};

// The part contributed by `len` bytes found at byte `pos` of a chunk whose
// checksummed length is `chunk_bytes` (pos, len, chunk_bytes even; pos + len <= chunk_bytes).
Fletcher32Part fletcher32_part(const void* data, std::size_t len, uint64_t pos, uint64_t chunk_bytes);

// Parts of disjoint byte ranges of one chunk add.
void fletcher32_add(Fletcher32Part& into, const Fletcher32Part& part);

// The stored checksum of a chunk from the sum of the parts covering it.
uint32_t fletcher32_value(const Fletcher32Part& whole);

}  // namespace dmuon::ckpt
