// The HDF5 calls whose signatures or results differ between the versions
// dmuon supports (1.10 to 1.14, docs/guide/install.md), in one place. HDF5 1.12 replaced
// H5O_info_t's object address by a token (H5O_info2_t) and gave the
// unversioned H5Oget_info / H5Ovisit names a `fields` argument that 1.10's
// lack; the numbered calls below take the same arguments in each version.
#pragma once
#include <hdf5.h>

#include <cstdint>

namespace dmuon::ckpt {

#if H5_VERSION_GE(1, 12, 0)
using H5ObjectInfo = H5O_info2_t;
using H5VisitCallback = H5O_iterate2_t;
inline herr_t h5_object_info(hid_t obj, H5ObjectInfo* info, unsigned fields) {
  return H5Oget_info3(obj, info, fields);
}
inline herr_t h5_object_info_by_name(hid_t loc, const char* name, H5ObjectInfo* info, unsigned fields) {
  return H5Oget_info_by_name3(loc, name, info, fields, H5P_DEFAULT);
}
inline herr_t h5_visit(hid_t obj, H5VisitCallback callback, void* data, unsigned fields) {
  return H5Ovisit3(obj, H5_INDEX_NAME, H5_ITER_INC, callback, data, fields);
}
// The object header's file address (from the superblock), which 1.12 keeps
// only inside the native connector's token.
inline herr_t h5_object_address(hid_t loc, const H5ObjectInfo& info, haddr_t* addr) {
  return H5VLnative_token_to_addr(loc, info.token, addr);
}
#else
using H5ObjectInfo = H5O_info_t;
using H5VisitCallback = H5O_iterate_t;
inline herr_t h5_object_info(hid_t obj, H5ObjectInfo* info, unsigned fields) {
  return H5Oget_info2(obj, info, fields);
}
inline herr_t h5_object_info_by_name(hid_t loc, const char* name, H5ObjectInfo* info, unsigned fields) {
  return H5Oget_info_by_name2(loc, name, info, fields, H5P_DEFAULT);
}
inline herr_t h5_visit(hid_t obj, H5VisitCallback callback, void* data, unsigned fields) {
  return H5Ovisit2(obj, H5_INDEX_NAME, H5_ITER_INC, callback, data, fields);
}
inline herr_t h5_object_address(hid_t, const H5ObjectInfo& info, haddr_t* addr) {
  *addr = info.addr;
  return 0;
}
#endif

// Whether H5Dget_chunk_info(_by_coord) reports a chunk's offset in the file,
// user block included, as HDF5 1.14.4 and later do, rather than its HDF5
// address (counted from the superblock), as earlier releases do (HDF5 pull
// request 4236). Asked of the library loaded at run time, which may be newer
// than the headers compiled against.
inline bool h5_chunk_info_is_physical() {
  static const bool physical = [] {
    unsigned major = 0, minor = 0, release = 0;
    H5get_libversion(&major, &minor, &release);
    return major > 1 || (major == 1 && (minor > 14 || (minor == 14 && release >= 4)));
  }();
  return physical;
}

// The file offset of a chunk from the address H5Dget_chunk_info reported.
inline uint64_t h5_chunk_file_offset(haddr_t reported, uint64_t user_block) {
  return static_cast<uint64_t>(reported) + (h5_chunk_info_is_physical() ? 0 : user_block);
}

}  // namespace dmuon::ckpt
