// Programmatic dependent launch (compute capability 9.0 and later). In a
// replayed graph whose kernel-to-kernel edges are programmatic
// (cuda_programmatic_edges.cpp), a kernel may be launched while the kernel it depends
// on is still running, so that the launch overlaps that kernel's tail instead
// of following it. Such a kernel must wait in its own code before it touches
// memory; every dmuon kernel starts with await_prerequisite_kernels(), which
// is why the graph may make edges into them programmatic.
#pragma once

namespace dmuon {

// First statement of every dmuon kernel. Lets the kernels that depend on this
// one launch now (they still wait for its end before reading anything), then
// returns once every kernel this one depends on has finished and its writes
// are visible. Launched the ordinary way, or on an older device, it does
// nothing.
__device__ __forceinline__ void await_prerequisite_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace dmuon
