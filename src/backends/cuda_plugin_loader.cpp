// Finds and loads libdmuon_cuda (cuda_plugin.hpp), once per process; it stays
// loaded until the process exits (backends made by it may live that long).
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cuda_plugin.hpp"
#include "core/error.hpp"

namespace dmuon {
namespace {

struct CudaPlugin {
  dmuon_cuda_plugin_create_fn create = nullptr;
  dmuon_cuda_plugin_device_visible_fn device_visible = nullptr;
  std::string why_not;  // what was tried, when create is null
};

// The directory of the file holding this code: libdmuon.so's when the library
// is shared (libdmuon_cuda is installed beside it), else the program's.
std::string directory_of_this_code() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&directory_of_this_code), &info) == 0 || !info.dli_fname) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// Where to look, first hit wins: $DMUON_CUDA_BACKEND alone when set (a moved
// install); else beside this code, then the loader's own search (the RUNPATH
// that programs get from the package, from dmuon.pc and in the build tree;
// LD_LIBRARY_PATH as modules set it; ld.so.cache), then the install's libdir.
std::vector<std::string> candidates() {
  if (const char* env = std::getenv("DMUON_CUDA_BACKEND"); env && *env) return {env};
  std::vector<std::string> out;
  const std::string here = directory_of_this_code();
  if (!here.empty()) out.push_back(here + "/" DMUON_CUDA_PLUGIN_FILE);
  out.push_back(DMUON_CUDA_PLUGIN_FILE);
  out.push_back(DMUON_CUDA_PLUGIN_INSTALL_DIR "/" DMUON_CUDA_PLUGIN_FILE);
  return out;
}

CudaPlugin open_plugin() {
  CudaPlugin p;
  for (const std::string& file : candidates()) {
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = dlerror();
      p.why_not += "\n  " + (e ? std::string(e) : file + ": cannot be loaded");
      continue;
    }
    const auto build = reinterpret_cast<dmuon_cuda_plugin_build_fn>(dlsym(handle, DMUON_CUDA_PLUGIN_BUILD_SYMBOL));
    const auto create = reinterpret_cast<dmuon_cuda_plugin_create_fn>(dlsym(handle, DMUON_CUDA_PLUGIN_CREATE_SYMBOL));
    const auto visible =
        reinterpret_cast<dmuon_cuda_plugin_device_visible_fn>(dlsym(handle, DMUON_CUDA_PLUGIN_DEVICE_VISIBLE_SYMBOL));
    if (!build || !create || !visible || std::string(build()) != DMUON_BUILD_ID) {
      p.why_not += "\n  " + file + ": not the CUDA backend of this dmuon build (" DMUON_BUILD_ID ")";
      dlclose(handle);
      continue;
    }
    p.create = create;
    p.device_visible = visible;
    p.why_not.clear();
    return p;
  }
  return p;
}

const CudaPlugin& plugin() {
  static std::once_flag once;
  static CudaPlugin p;
  std::call_once(once, [] { p = open_plugin(); });
  return p;
}

}  // namespace

std::unique_ptr<Backend> load_cuda_backend(MPI_Comm comm, const std::string& device_spec) {
  const CudaPlugin& p = plugin();
  // Collective, as the backend's own creation is: a rank that cannot load the
  // library makes every rank fail, instead of leaving the others in NCCL's setup.
  int mine = p.create ? 1 : 0, all = 0;
  require(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) == MPI_SUCCESS, DMUON_ERR_MPI,
          "backend selection: MPI_Allreduce failed");
  if (!p.create)
    fail(DMUON_ERR_BACKEND_NOT_COMPILED,
         "the \"cuda\" backend's library " DMUON_CUDA_PLUGIN_FILE
         " could not be loaded (it needs the CUDA runtime, cuBLAS and NCCL; DMUON_CUDA_BACKEND may name its path):" +
             p.why_not);
  if (!all)
    fail(DMUON_ERR_BACKEND_NOT_COMPILED,
         "the \"cuda\" backend's library " DMUON_CUDA_PLUGIN_FILE " could not be loaded on another rank");
  int status = DMUON_ERR_INTERNAL;
  char message[1024] = {};
  Backend* b = p.create(comm, device_spec.c_str(), &status, message, sizeof message);
  if (!b) fail(status, message);
  return std::unique_ptr<Backend>(b);
}

bool cuda_library_sees_device() {
  const CudaPlugin& p = plugin();
  return p.device_visible && p.device_visible() != 0;
}

}  // namespace dmuon
