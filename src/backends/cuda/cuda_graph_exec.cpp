#include "backends/cuda/cuda_graph_exec.hpp"

#include <vector>

namespace dmuon {

int memset_nodes(cudaGraph_t g) {
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return 0;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) return 0;
  int count = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    if (cudaGraphNodeGetType(node, &t) != cudaSuccess) continue;
    if (t == cudaGraphNodeTypeMemset) ++count;
    cudaGraph_t child = nullptr;
    if (t == cudaGraphNodeTypeGraph && cudaGraphChildGraphNodeGetGraph(node, &child) == cudaSuccess)
      count += memset_nodes(child);
  }
  return count;
}

cudaError_t instantiate_replayed_graph(cudaGraphExec_t* exec, cudaGraph_t g, cudaStream_t stream) {
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
