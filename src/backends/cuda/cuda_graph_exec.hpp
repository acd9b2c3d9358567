// How the graphs that steps replay are instantiated.
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace dmuon {

// Calls `visit` with every node of `g` and of its child graphs.
void for_each_node(cudaGraph_t g, const std::function<void(cudaGraphNode_t, cudaGraphNodeType)>& visit);

// A graph with at least this many memset nodes is instantiated for device
// launch (docs/decisions.md, "Graphs with memsets are instantiated for device
// launch").
constexpr int kDeviceLaunchMemsets = 3;

// Memset nodes of `g`, child graphs included.
int memset_nodes(cudaGraph_t g);

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
