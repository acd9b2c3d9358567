#include "backends/cuda/cuda_graph_exec.hpp"

#include <string>
#include <vector>

#include "backends/cuda/cuda_programmatic_edges.hpp"

namespace dmuon {

void for_each_node(cudaGraph_t g, const std::function<void(cudaGraphNode_t, cudaGraphNodeType)>& visit) {
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) return;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    if (cudaGraphNodeGetType(node, &t) != cudaSuccess) continue;
    visit(node, t);
    cudaGraph_t child = nullptr;
    if (t == cudaGraphNodeTypeGraph && cudaGraphChildGraphNodeGetGraph(node, &child) == cudaSuccess)
      for_each_node(child, visit);
  }
}

int memset_nodes(cudaGraph_t g) {
  int count = 0;
  for_each_node(g, [&](cudaGraphNode_t, cudaGraphNodeType t) { count += t == cudaGraphNodeTypeMemset; });
  return count;
}

cudaError_t instantiate_replayed_graph(cudaGraphExec_t* exec, cudaGraph_t g, cudaStream_t stream) {
  const ProgrammaticEdges which = programmatic_edges_wanted();
  std::vector<GraphEdge> changed;
  if (which != ProgrammaticEdges::none)
    changed = make_edges_programmatic(g, [which](const std::string& k) { return waits_for_prerequisites(k, which); });
  if (!changed.empty()) {
    const cudaError_t rc = instantiate_plain_or_for_device(exec, g, stream);
    if (rc == cudaSuccess) return rc;
    (void)cudaGetLastError();
    make_edges_plain(g, changed);  // a driver that refuses them: the graph as captured
  }
  return instantiate_plain_or_for_device(exec, g, stream);
}

cudaError_t instantiate_plain_or_for_device(cudaGraphExec_t* exec, cudaGraph_t g, cudaStream_t stream) {
  *exec = nullptr;
  if (memset_nodes(g) >= kDeviceLaunchMemsets) {
    if (cudaGraphInstantiateWithFlags(exec, g, cudaGraphInstantiateFlagDeviceLaunch) == cudaSuccess) {
      if (cudaGraphUpload(*exec, stream) == cudaSuccess) return cudaSuccess;
      cudaGraphExecDestroy(*exec);
      *exec = nullptr;
    }
    (void)cudaGetLastError();  // not for device launch (a host node, say): the plain way
  }
  return cudaGraphInstantiate(exec, g, 0);
}

}  // namespace dmuon
