// Programmatic edges in the graphs dmuon replays (docs/decisions.md,
// "Programmatic edges into kernels that wait"): which edges may be made so,
// and the graph surgery that makes them. The kernels' side is cuda_pdl.cuh.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

namespace dmuon {

// Which kernel-to-kernel edges of a replayed graph become programmatic
// (cuda_pdl.cuh): none; those into dmuon's kernels; those and the ones into
// cuBLAS's nvjet kernels. On the current device: none below compute
// capability 9.0; else the second, unless DMUON_CUDA_PDL (read once per
// process) is 0 (none) or 2 (into cuBLAS's kernels too).
enum class ProgrammaticEdges { none, into_dmuon_kernels, into_dmuon_and_cublas_kernels };
ProgrammaticEdges programmatic_edges_wanted();

// Whether the kernel of this mangled name waits in its code for the kernels it
// depends on, so that an edge into it may be programmatic under `which`.
bool waits_for_prerequisites(const std::string& kernel, ProgrammaticEdges which);

// The mangled name of the kernel a kernel node launches; empty when unknown.
// Kernels launched through the runtime are named by it; those that libraries
// launch through the driver (cuBLAS's) by the driver (cuFuncGetName or
// cuKernelGetName), reached without linking the driver library.
std::string kernel_name(cudaGraphNode_t node);

struct GraphEdge {
  cudaGraphNode_t from, to;
};
// Makes the plain edges of `g` between two kernel nodes programmatic where
// `into` accepts the second kernel's name; returns the edges changed.
std::vector<GraphEdge> make_edges_programmatic(cudaGraph_t g, const std::function<bool(const std::string&)>& into);
// Undoes make_edges_programmatic for `edges`.
void make_edges_plain(cudaGraph_t g, const std::vector<GraphEdge>& edges);
// Programmatic edges of `g` (its top level).
int programmatic_edges(cudaGraph_t g);

// Built against CUDA before 12.3, none of this does anything: no edge data.

}  // namespace dmuon
