// libdmuon_cuda's entry points (backends/cuda_plugin.hpp): the only symbols
// the core looks up. Each catches what the backend throws and hands it over
// as a status and a message.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "backends/backend.hpp"
#include "backends/cuda_plugin.hpp"
#include "core/error.hpp"

#define DMUON_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
void put_message(char* out, size_t size, const char* text) {
  if (out && size > 0) std::snprintf(out, size, "%s", text);
}
}  // namespace

DMUON_PLUGIN_EXPORT const char* dmuon_cuda_plugin_build(void) { return DMUON_BUILD_ID; }

DMUON_PLUGIN_EXPORT dmuon::Backend* dmuon_cuda_plugin_create(MPI_Comm comm, const char* device_spec, int* status,
                                                             char* message, size_t message_size) {
  try {
    return dmuon::make_cuda_backend(comm, device_spec ? device_spec : "").release();
  } catch (const dmuon::Error& e) {
    *status = e.status();
    put_message(message, message_size, e.what());
  } catch (const std::bad_alloc&) {
    *status = DMUON_ERR_OUT_OF_MEMORY;
    put_message(message, message_size, "out of memory creating the cuda backend");
  } catch (const std::exception& e) {
    *status = DMUON_ERR_INTERNAL;
    put_message(message, message_size, e.what());
  }
  return nullptr;
}

DMUON_PLUGIN_EXPORT int dmuon_cuda_plugin_device_visible(void) {
  try {
    return dmuon::cuda_device_visible() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}
