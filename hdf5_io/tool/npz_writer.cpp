#include "npz_writer.hpp"

#include <array>
#include <limits>

#include "core/error.hpp"

namespace dmuon::ckpt {

namespace {
// CRC-32 (IEEE 802.3, zip's), bytewise from a table.
uint32_t crc32_ieee(const std::string& bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void put16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xFF);
  s += static_cast<char>((v >> 8) & 0xFF);
}
void put32(std::string& s, uint32_t v) {
  put16(s, v & 0xFFFF);
  put16(s, v >> 16);
}

// The .npy v1.0 bytes of one array: magic, header padded to 64 bytes, data.
std::string npy(const std::string& descr, const std::vector<int64_t>& shape, const void* data, std::size_t bytes) {
  std::string dims;
  for (int64_t e : shape) dims += std::to_string(e) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 1);  // (a, b) but (a,) for one dimension
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string s = "\x93NUMPY";
  s += '\x01';
  s += '\x00';
  put16(s, static_cast<uint32_t>(header.size()));
  s += header;
  s.append(static_cast<const char*>(data), bytes);
  return s;
}
}  // namespace

NpzWriter::NpzWriter(const std::string& path) : out_(path, std::ios::binary | std::ios::trunc), path_(path) {
  require(out_.good(), DMUON_ERR_IO, "cannot create '" + path + "'");
}

void NpzWriter::add(const std::string& name, const std::string& descr, const std::vector<int64_t>& shape,
                    const void* data, std::size_t bytes) {
  const std::string body = npy(descr, shape, data, bytes);
  const std::string file = name + ".npy";
  const auto offset = static_cast<uint64_t>(out_.tellp());
  require(body.size() < std::numeric_limits<uint32_t>::max() && offset < std::numeric_limits<uint32_t>::max(),
          DMUON_ERR_NOT_SUPPORTED, "'" + path_ + "': the export exceeds 4 GiB (zip64 is not written)");
  const Entry e{file, crc32_ieee(body), static_cast<uint32_t>(body.size()), static_cast<uint32_t>(offset)};
  std::string h;
  put32(h, 0x04034b50);  // local file header
  put16(h, 20);          // version needed
  put16(h, 0);           // flags
  put16(h, 0);           // stored
  put16(h, 0);           // time
  put16(h, 0x21);        // date: 1980-01-01
  put32(h, e.crc);
  put32(h, e.size);
  put32(h, e.size);
  put16(h, static_cast<uint32_t>(file.size()));
  put16(h, 0);
  out_ << h << file << body;
  entries_.push_back(e);
}

void NpzWriter::close() {
  const auto start = static_cast<uint32_t>(out_.tellp());
  std::string c;
  for (const Entry& e : entries_) {
    put32(c, 0x02014b50);  // central directory header
    put16(c, 20);
    put16(c, 20);
    put16(c, 0);
    put16(c, 0);
    put16(c, 0);     // time
    put16(c, 0x21);  // date
    put32(c, e.crc);
    put32(c, e.size);
    put32(c, e.size);
    put16(c, static_cast<uint32_t>(e.name.size()));
    put32(c, 0);  // extra and comment lengths
    put32(c, 0);  // disk number, internal attributes
    put32(c, 0);  // external attributes
    put32(c, e.offset);
    c += e.name;
  }
  std::string end;
  put32(end, 0x06054b50);
  put32(end, 0);
  put16(end, static_cast<uint32_t>(entries_.size()));
  put16(end, static_cast<uint32_t>(entries_.size()));
  put32(end, static_cast<uint32_t>(c.size()));
  put32(end, start);
  put16(end, 0);
  out_ << c << end;
  out_.close();
  require(!out_.fail(), DMUON_ERR_IO, "writing '" + path_ + "' failed");
}

}  // namespace dmuon::ckpt
