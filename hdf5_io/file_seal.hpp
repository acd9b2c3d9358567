// The whole-file seal of a checkpoint: a 512-byte HDF5 user block at the start
// of the file holding a small header (magic, seal version, file length, the
// CRC-32C of every byte after the user block, and the CRC-32C of the user
// block itself). It is written after HDF5 has closed the file and verified
// with plain POSIX reads before HDF5 opens it, so a damaged file is refused
// before HDF5's metadata parser sees a single byte of it (HDF5 1.10 can crash
// on some damaged files; fuzz/README.md).
//
// HDF5 ignores a user block: h5dump, h5py and any HDF5 library read the file
// as usual. The layout is described in docs/checkpoint-format.md ("Seal").
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

namespace dmuon::ckpt {

// Size of the user block the writer reserves (H5Pset_userblock); the seal
// header occupies the start of it, the rest is zero.
constexpr int64_t kSealBytes = 512;

// Collective: write the seal into the user block of the closed file `path`
// (created with a kSealBytes user block). Every rank checksums a 1/N byte
// range with pread; rank 0 writes the header with pwrite. The caller fsyncs.
// Throws DMUON_ERR_IO (same outcome on every rank).
void seal_file(MPI_Comm comm, const std::string& path);

// Collective: verify the seal of `path` before anything else reads it, each
// rank checksumming a 1/N byte range. A missing or garbled header, a length
// that differs from the file's, or a checksum mismatch throws
// DMUON_ERR_CHECKPOINT_CORRUPT naming the file and what failed; an unreadable
// file throws DMUON_ERR_IO. Same outcome on every rank.
void verify_seal(MPI_Comm comm, const std::string& path);

}  // namespace dmuon::ckpt
