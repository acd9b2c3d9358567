// The CUDA backend as a library of its own (libdmuon_cuda), loaded by the core
// with dlopen the first time "cuda" or "auto" asks for it, the way libCEED's
// backends register themselves. So a program linking dmuon needs no CUDA
// toolkit to build and no CUDA driver to run the CPU backend, and one install
// of a CUDA-enabled build serves CPU and GPU partitions alike.
//
// The library's entry points have C linkage and C types: an error crosses the
// boundary as a status and a message, never as an exception.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

namespace dmuon {
class Backend;
}

extern "C" {
// The build the library comes from (dmuon's version and an identifier drawn
// once per build directory). The core and the library share C++ classes
// (Backend and what it holds), so only the two halves of one build may pair.
typedef const char* (*dmuon_cuda_plugin_build_fn)(void);
// A CUDA backend on `comm`. device_spec is the text after "cuda" in the
// resource string ("", ":current" or ":N"; make_cuda_backend in backend.hpp). NULL on failure, with *status and
// message (NUL-terminated, at most message_size bytes) set.
typedef dmuon::Backend* (*dmuon_cuda_plugin_create_fn)(MPI_Comm comm, const char* device_spec, int* status,
                                                       char* message, size_t message_size);
// 1 when this process sees a CUDA device, else 0.
typedef int (*dmuon_cuda_plugin_device_visible_fn)(void);
}

#define DMUON_CUDA_PLUGIN_BUILD_SYMBOL "dmuon_cuda_plugin_build"
#define DMUON_CUDA_PLUGIN_CREATE_SYMBOL "dmuon_cuda_plugin_create"
#define DMUON_CUDA_PLUGIN_DEVICE_VISIBLE_SYMBOL "dmuon_cuda_plugin_device_visible"

namespace dmuon {

// The core's side (cuda_plugin_loader.cpp, or cuda/cuda_not_compiled.cpp in a
// build without CUDA). load_cuda_backend throws Error: the library's own
// status, or DMUON_ERR_BACKEND_NOT_COMPILED when it is absent or cannot be
// loaded (the message says which files were tried and why they failed).
std::unique_ptr<Backend> load_cuda_backend(MPI_Comm comm, const std::string& device_spec);
// False when the library cannot be loaded (no CUDA runtime on this machine).
bool cuda_library_sees_device();

}  // namespace dmuon
