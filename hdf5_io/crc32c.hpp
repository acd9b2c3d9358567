// CRC-32C (Castagnoli), the checksum dmuon stores beside every dataset of a
// checkpoint, and the combination rule that makes it independent of how the
// bytes were split across ranks.
//
// Why CRC-32C: it is hardware-accelerated on x86-64 (SSE4.2) and ARMv8, so
// checksumming a checkpoint costs a small fraction of writing it, and a CRC of
// a concatenation can be computed from the CRCs of the pieces and their
// lengths (crc32c_combine), which lets every rank checksum only its own slice.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dmuon::ckpt {

// CRC of `len` bytes continuing from the CRC `crc` of the bytes before them
// (0 for none): crc32c(ab) == crc32c(b, crc32c(a)).
uint32_t crc32c(const void* data, std::size_t len, uint32_t crc = 0);

// CRC of the concatenation a||b from crc32c(a), crc32c(b) and the length of b.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

}  // namespace dmuon::ckpt
