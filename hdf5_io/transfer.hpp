// Moving one dataset's slice between a rank's memory and the file: the
// hyperslab selections (canonical file offsets on one side, flat-buffer
// offsets on the other), the slice's CRC pieces, and chunked fletcher32
// dataset creation. Shared by the writer and the reader.
#pragma once
#include <hdf5.h>

#include <memory>
#include <string>
#include <vector>

#include "collective.hpp"
#include "format.hpp"
#include "h5_util.hpp"

namespace dmuon::ckpt {

// Zeroed host memory for restore staging, mapped from the kernel
// (map_anonymous): its pages come on first touch or when populated (by the
// reader's helper threads). A host backend can move its pages into the
// optimizer's storage (Backend::move_pages_into) instead of copying them.
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::size_t bytes);
  char* data() const { return p_.get(); }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  // Forgets the mapping (its pages were moved elsewhere): nothing is unmapped.
  char* release() {
    n_ = 0;
    return p_.release();
  }

 private:
  struct Unmap {
    std::size_t length;  // no initializer: GCC needs none to default-construct it here
    void operator()(char* p) const noexcept;
  };
  std::unique_ptr<char, Unmap> p_;
  std::size_t n_ = 0;
};

// One dataset as this rank sees it: which elements it moves, from/to where.
struct DatasetJob {
  std::string path;
  hid_t file_type = -1;     // element type in the file
  std::size_t elem = 0;     // bytes per element (file and memory types are the same size)
  int64_t total = 0;        // elements in the dataset
  int64_t chunk = 0;        // elements per chunk
  std::vector<Piece> pieces;  // sorted by file offset, mem offsets increasing too
  char* host = nullptr;     // host memory the mem offsets index
  int64_t host_elements = 0;
  std::string element_type;  // "float32", "bfloat16", "int64", ... (attribute for readers)
  bool direct = false;       // a data dataset: its chunks move without HDF5 (direct_chunks.hpp)
};

// The CRC-32C of each piece's bytes in host memory, at canonical byte offsets.
std::vector<CrcPiece> crc_pieces(const DatasetJob& job);

// Create the dataset (chunked, fletcher32), its attributes (crc32c,
// element_type), and write the pieces with one H5Dwrite: rank 0 alone, in
// serial HDF5, for the small datasets (/index, /adam/step). Throws DMUON_ERR_IO.
void create_and_write(hid_t file, const DatasetJob& job, uint32_t crc);

// Open a dataset for reading and check its size and type against `job`;
// `stored` gets its crc32c attribute. Throws DMUON_ERR_CHECKPOINT_CORRUPT.
H5Id open_for_read(hid_t file, const DatasetJob& job, uint32_t& stored);
// Independent read of this rank's pieces through HDF5 into job.host (HDF5
// checks fletcher32). A chunk that fails it throws DMUON_ERR_CHECKPOINT_CORRUPT.
void read_with_hdf5(hid_t dset, const DatasetJob& job);
// Both: returns the stored crc32c attribute.
uint32_t read_pieces(hid_t file, const DatasetJob& job);

// Merge pieces that continue each other in both the file and memory.
std::vector<Piece> merge_pieces(std::vector<Piece> pieces);

}  // namespace dmuon::ckpt
