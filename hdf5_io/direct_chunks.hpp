// Data chunks moved between memory and the file without HDF5's filter
// pipeline. Parallel HDF5 1.10 writes fletcher32-filtered datasets only
// collectively, copying every chunk and checksumming it in one scalar loop
// (about 4 s of CPU per GB, docs/benchmarks.md), and it cannot write a chunk
// directly (H5Dwrite_chunk is serial only). So a save goes in two steps:
//
//  1. Rank 0 alone builds the file's HDF5 structure with serial HDF5: every
//     attribute, /index and /adam/step with their data, and the data datasets
//     with all chunks allocated early. Allocation writes fill chunks; a file
//     driver of our own (the "skeleton" driver, a plain POSIX driver) drops
//     those raw-data writes, so the chunks cost no I/O and read as zeros until
//     written. Rank 0 then reads the chunk addresses back from HDF5.
//  2. Every rank writes its own elements straight from its flat buffers into
//     the chunks with pwrite, checksums them with HDF5's fletcher32 in parts
//     (fletcher32.hpp), and the 4 checksum bytes after each chunk are written
//     once the parts of all ranks are summed.
//
// The result is an ordinary HDF5 file, byte for byte what HDF5 itself writes
// for the same chunks, which h5dump, h5py and HDF5's own fletcher32 check read.
// Restore reads the same chunks with pread and checks fletcher32 the same way
// when a dataset has exactly this layout (chunked, fletcher32 as its only
// filter, every chunk stored whole); anything else goes through HDF5.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "file_seal.hpp"
#include "fletcher32.hpp"
#include "h5_util.hpp"
#include "posix_io.hpp"
#include "transfer.hpp"

namespace dmuon::ckpt {

// A file access list selecting the skeleton driver. While a RawWriteGate is
// alive, that driver drops raw-data writes (rank 0 opens one around the
// creation of the data datasets only).
H5Id skeleton_fapl();
class RawWriteGate {
 public:
  RawWriteGate();
  ~RawWriteGate();
  RawWriteGate(const RawWriteGate&) = delete;
  RawWriteGate& operator=(const RawWriteGate&) = delete;
};

// Where a dataset's chunks are: absolute byte offsets in the file (user block
// included) of chunk 0, 1, ..., each holding chunk_bytes of data and then
// its 4-byte fletcher32.
struct ChunkMap {
  int64_t chunk_elements = 0;
  int64_t chunk_bytes = 0;
  std::vector<uint64_t> address;
};

// Rank 0, serial HDF5 on a skeleton_fapl file: create the data dataset
// (chunked, fletcher32, allocated early, no fill writes reaching the file)
// with its crc32c and element_type attributes, and return its chunk map.
// `base` is the file's user block size. Throws DMUON_ERR_IO.
ChunkMap create_skeleton_dataset(hid_t file, const DatasetJob& job, uint32_t crc, uint64_t base);

// Elements per chunk of a data dataset (a dataset smaller than a chunk is one chunk).
int64_t chunk_elements_of(const DatasetJob& job);

// Save, one pass over this rank's elements of a dataset (block by block, so
// each block is read from memory once): their CRC-32C pieces, returned, and
// their fletcher32 parts, added into parts[chunk].
std::vector<CrcPiece> checksum_chunks(const DatasetJob& job, int64_t chunk_elements, Fletcher32Part* parts);

// This rank's elements of a dataset written into their chunks with pwrite on
// `fd`. Throws DMUON_ERR_IO.
void write_chunks(int fd, const std::string& path, const DatasetJob& job, const ChunkMap& map);

// Collective: sum every chunk's parts over the ranks (in place, every job's
// chunks in one array; `stored`, when given, is summed along: each chunk's
// stored checksum comes from one rank, 0 from the others).
void sum_parts(MPI_Comm comm, std::vector<Fletcher32Part>& parts, std::vector<uint64_t>* stored);

// Write the checksum of the chunks numbered rank, rank + world, ... of one
// dataset (parts already summed). Throws DMUON_ERR_IO.
void write_checksums(int fd, const std::string& path, const ChunkMap& map, const Fletcher32Part* parts, int rank,
                     int world);

// Restore side: the chunk map of an open dataset when it has the layout the
// direct path handles (see the top of this file) and `job` can use it, for
// the chunks this rank reads plus the ones whose checksum it reads (rank,
// rank + world, ...; rank 0 of world 1: every chunk, which the restore
// looks up once and broadcasts); false when HDF5 must read it instead.
bool direct_chunk_map(hid_t dset, const DatasetJob& job, uint64_t base, int rank, int world, ChunkMap& map);

// Read this rank's elements from the chunks with pread into job.host, add
// their fletcher32 parts to parts[chunk] and return their CRC-32C pieces
// (checksummed block by block as they arrive); for the chunks numbered rank,
// rank + world, ... also the dataset's zero tail in the last chunk and the
// stored checksum (into stored[chunk]). Throws DMUON_ERR_IO or
// DMUON_ERR_CHECKPOINT_CORRUPT (a short read: truncated file).
// `ahead`, when given, holds this job's ranges (add_read_ranges) and is told
// of each block before it is read.
std::vector<CrcPiece> read_chunks(int fd, const std::string& path, const DatasetJob& job, const ChunkMap& map,
                 Fletcher32Part* parts, uint64_t* stored, int rank, int world, ReadAhead* ahead);

// Read job's elements from the chunks with pread into job.host, with no
// checksum: for bytes another rank has just read and verified (a restore's
// replicated datasets, when all ranks share one page cache). Throws
// DMUON_ERR_IO or DMUON_ERR_CHECKPOINT_CORRUPT (a short read).
void copy_chunks(int fd, const std::string& path, const DatasetJob& job, const ChunkMap& map);

// The file ranges read_chunks will read for `job`, in its order.
void add_read_ranges(const DatasetJob& job, const ChunkMap& map, ReadAhead& ahead);

// The seal's extents of an open checkpoint as it is now: every stored chunk
// (data and fletcher32, absolute offsets, `base` = user block bytes) of each
// buffer dataset (dataset_path) that is chunked with fletcher32 as its only
// filter and has a numeric element type, so that its bytes are raw numbers
// HDF5 checks and never parses. The index and /adam/step are left out: they
// are small and stay covered by the seal. Throws DMUON_ERR_IO.
std::vector<SealExtent> data_chunk_extents(hid_t file, uint64_t base);

// Chunks of a dataset of `total` elements in chunks of `chunk` elements.
inline int64_t chunk_count(int64_t total, int64_t chunk) { return chunk > 0 ? (total + chunk - 1) / chunk : 0; }

}  // namespace dmuon::ckpt
