// Refuses a device this build has no kernels for, at context creation, with
// a message naming its architecture, instead of a failed launch in a step.
#pragma once

namespace dmuon {

// Call after the device is chosen. Throws Error: DMUON_ERR_NOT_SUPPORTED
// ("this dmuon build has no kernels for sm_80 (built for: 90)") or
// DMUON_ERR_CUDA when the device cannot be queried.
void require_kernels_for_device(int device);

}  // namespace dmuon
