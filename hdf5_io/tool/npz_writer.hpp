// A minimal .npz writer (a zip archive of .npy arrays, stored without
// compression), enough for NumPy's np.load and for torch through it.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace dmuon::ckpt {

class NpzWriter {
 public:
  explicit NpzWriter(const std::string& path);
  // descr: a NumPy type string ("<f4", "<i8"); data holds prod(shape) elements.
  void add(const std::string& name, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
           std::size_t bytes);
  // Writes the central directory; throws DMUON_ERR_IO on a failed write.
  void close();

 private:
  struct Entry {
    std::string name;
    uint32_t crc;
    uint32_t size;
    uint32_t offset;
  };
  std::ofstream out_;
  std::string path_;
  std::vector<Entry> entries_;
};

}  // namespace dmuon::ckpt
