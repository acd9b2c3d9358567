// How the graphs that steps replay are instantiated.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <vector>

namespace dmuon {

// Calls `visit` with every node of `g` and of its child graphs.
void for_each_node(cudaGraph_t g, const std::function<void(cudaGraphNode_t, cudaGraphNodeType)>& visit);

// A graph with at least this many memset nodes is instantiated for device
// launch (docs/decisions.md, "Graphs with memsets are instantiated for device
// launch").
constexpr int kDeviceLaunchMemsets = 3;

// Memset nodes of `g`, child graphs included.
int memset_nodes(cudaGraph_t g);

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

// Instantiates `g` with its kernel-to-kernel edges made programmatic as
// programmatic_edges_wanted() says (as captured, should the driver refuse
// them), then as instantiate_plain_or_for_device does.
cudaError_t instantiate_replayed_graph(cudaGraphExec_t* exec, cudaGraph_t g, cudaStream_t stream);

// Instantiates `g` (a graph for device launch is also uploaded on `stream`);
// launched from the host with cudaGraphLaunch either way. A plain executable graph's host launch costs
// more per memset node (cuBLASLt clears its workspace with one before many
// large products); one made for device launch lives on the device whole and
// its host launch costs the same whatever it holds, but each replay takes a
// few microseconds longer on the device. So: for device launch where the
// graph holds kDeviceLaunchMemsets memsets or more and its nodes allow it
// (kernels, copies and memsets on one device), else plainly.
cudaError_t instantiate_plain_or_for_device(cudaGraphExec_t* exec, cudaGraph_t g, cudaStream_t stream);

}  // namespace dmuon
