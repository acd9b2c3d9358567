// The seal of a checkpoint: an HDF5 user block at the start of the file
// holding a small header and a list of data-chunk extents. The header's
// CRC-32C covers every byte of the file after the user block EXCEPT those
// extents -- that is, everything HDF5 parses (superblock, object headers,
// B-trees, heaps, attributes, the small datasets written through HDF5). It is
// verified with plain POSIX reads before HDF5 opens the file, so damaged
// metadata never reaches HDF5's parser (HDF5 1.10 can crash on some damaged
// files; fuzz/README.md).
//
// The data chunks are left out because they are checked anyway, and read
// anyway, by the data pass: fletcher32 per chunk (dmuon's direct reader, or
// HDF5 on any other read) and dmuon's CRC-32C per dataset. Sealing them too
// made a restore read the whole file twice from disk (seal version 1).
//
// HDF5 ignores a user block: h5dump, h5py and any HDF5 library read the file
// as usual. The layout is described in docs/checkpoint-format.md ("Seal").
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dmuon::ckpt {

// A byte range of the file left out of the seal: one or more data chunks
// (their data and 4-byte fletcher32), absolute file offsets.
struct SealExtent {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// The user block to reserve (H5Pset_userblock) for a seal listing up to
// `max_extents` extents: the smallest power of two >= 512 holding the header
// and the list. HDF5 requires a power of two >= 512.
int64_t seal_block_bytes(std::size_t max_extents);

// Sorted by offset, touching or overlapping ranges merged, empty ones dropped.
std::vector<SealExtent> merge_extents(std::vector<SealExtent> extents);

// One process, not collective: write the seal of the closed file `path`,
// whose user block is `block_bytes` (power of two >= 512), leaving out
// `extents` (merged here). Reads back only the bytes it covers (HDF5's
// metadata and small datasets; the data chunks need not be written yet,
// since they are not covered). Extents that do not fit in the user block
// stay covered. The caller fsyncs. Throws DMUON_ERR_IO.
void write_seal(const std::string& path, int64_t block_bytes, std::vector<SealExtent> extents);

// Collective, for tools that change a checkpoint on purpose through HDF5
// (tests, the fuzzer's structured mode): rank 0 finds the data-chunk extents
// of the file as it is now (data_chunk_extents in direct_chunks.hpp) and
// writes a fresh seal (version 2). Throws DMUON_ERR_IO (same on every rank).
void seal_file(MPI_Comm comm, const std::string& path);

// Collective: verify the seal of `path` before anything else reads it. Rank 0
// checks the header and the extent list; the covered bytes are checksummed by
// rank 0 alone when they are few, else split evenly over the ranks. Version 1
// seals (the whole file after the user block) are verified too. A missing or
// garbled header, an extent list that is damaged or points outside the file
// or overlaps, a length that differs from the file's, or a checksum mismatch
// throws DMUON_ERR_CHECKPOINT_CORRUPT naming the file and what failed; a
// newer seal version throws DMUON_ERR_NOT_SUPPORTED; an unreadable file
// DMUON_ERR_IO. Same outcome on every rank. Returns the user block size the
// seal names (the reader checks HDF5 agrees).
int64_t verify_seal(MPI_Comm comm, const std::string& path);

}  // namespace dmuon::ckpt
