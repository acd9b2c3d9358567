#include "backends/cuda/cuda_graph_exec.hpp"

#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

namespace {

// A driver entry point, looked up once; null where the driver lacks it.
template <class F>
F driver_function(const char* symbol, unsigned version) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &f, version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

std::string kernel_name(cudaGraphNode_t node) {
  const char* name = nullptr;
  cudaKernelNodeParams rp = {};
  if (cudaGraphKernelNodeGetParams(node, &rp) == cudaSuccess && rp.func && cudaFuncGetName(&name, rp.func) == cudaSuccess &&
      name)
    return name;
  (void)cudaGetLastError();
  // Through the driver: a library's kernel node may hold a CUkernel (loaded
  // with cuLibraryLoad) and no CUfunction, which the runtime cannot name.
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*);
  using FuncName = CUresult (*)(const char**, CUfunction);
  using KernelName = CUresult (*)(const char**, CUkernel);
  static const auto get_params = driver_function<GetParams>("cuGraphKernelNodeGetParams", 12000);
  static const auto func_name = driver_function<FuncName>("cuFuncGetName", 12030);
  static const auto kernel_name_of = driver_function<KernelName>("cuKernelGetName", 12030);
  CUDA_KERNEL_NODE_PARAMS_v2 p = {};
  if (!get_params || get_params(node, &p) != CUDA_SUCCESS) return {};
  name = nullptr;
  if (p.func && func_name && func_name(&name, p.func) == CUDA_SUCCESS && name) return name;
  name = nullptr;
  if (p.kern && kernel_name_of && kernel_name_of(&name, p.kern) == CUDA_SUCCESS && name) return name;
  return {};
}

ProgrammaticEdges programmatic_edges_wanted() {
  static const ProgrammaticEdges from_env = [] {
    const char* v = std::getenv("DMUON_CUDA_PDL");
    if (v && !std::strcmp(v, "0")) return ProgrammaticEdges::none;
    if (v && !std::strcmp(v, "2")) return ProgrammaticEdges::into_dmuon_and_cublas_kernels;
    return ProgrammaticEdges::into_dmuon_kernels;
  }();
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return ProgrammaticEdges::none;
  }
  return major >= 9 ? from_env : ProgrammaticEdges::none;
}

bool waits_for_prerequisites(const std::string& kernel, ProgrammaticEdges which) {
  if (which == ProgrammaticEdges::none || kernel.empty()) return false;
  // Every kernel of namespace dmuon starts with await_prerequisite_kernels().
  if (kernel.find("5dmuon") != std::string::npos) return true;
  // cuBLAS's nvjet kernels wait too (tests/gpu/test_cuda_pdl.cu shows it for
  // the products of Newton-Schulz's shapes; docs/decisions.md).
  return which == ProgrammaticEdges::into_dmuon_and_cublas_kernels && kernel.find("nvjet") != std::string::npos;
}

std::vector<GraphEdge> make_edges_programmatic(cudaGraph_t g, const std::function<bool(const std::string&)>& into) {
  std::vector<GraphEdge> changed;
  size_t n = 0;
  if (cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return changed;
  }
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n) != cudaSuccess) {
    (void)cudaGetLastError();
    return changed;
  }
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType a = cudaGraphNodeTypeEmpty, b = cudaGraphNodeTypeEmpty;
    if (cudaGraphNodeGetType(from[i], &a) != cudaSuccess || cudaGraphNodeGetType(to[i], &b) != cudaSuccess ||
        a != cudaGraphNodeTypeKernel || b != cudaGraphNodeTypeKernel || data[i].type != cudaGraphDependencyTypeDefault ||
        !into(kernel_name(to[i]))) {
      (void)cudaGetLastError();
      continue;
    }
    cudaGraphEdgeData e = {};
    e.from_port = cudaGraphKernelNodePortProgrammatic;
    e.type = cudaGraphDependencyTypeProgrammatic;
    if (cudaGraphRemoveDependencies(g, &from[i], &to[i], &data[i], 1) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (cudaGraphAddDependencies(g, &from[i], &to[i], &e, 1) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaGraphAddDependencies(g, &from[i], &to[i], &data[i], 1);  // the edge as it was
      continue;
    }
    changed.push_back({from[i], to[i]});
  }
  return changed;
}

void make_edges_plain(cudaGraph_t g, const std::vector<GraphEdge>& edges) {
  cudaGraphEdgeData e = {};
  e.from_port = cudaGraphKernelNodePortProgrammatic;
  e.type = cudaGraphDependencyTypeProgrammatic;
  const cudaGraphEdgeData plain = {};
  for (const GraphEdge& x : edges) {
    (void)cudaGraphRemoveDependencies(g, &x.from, &x.to, &e, 1);
    (void)cudaGraphAddDependencies(g, &x.from, &x.to, &plain, 1);
  }
  (void)cudaGetLastError();
}

int programmatic_edges(cudaGraph_t g) {
  size_t n = 0;
  if (cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n) != cudaSuccess || n == 0) return 0;
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n) != cudaSuccess) return 0;
  int count = 0;
  for (size_t i = 0; i < n; ++i) count += data[i].type == cudaGraphDependencyTypeProgrammatic;
  return count;
}

cudaError_t instantiate_replayed_graph(cudaGraphExec_t* exec, cudaGraph_t g, cudaStream_t stream) {
  *exec = nullptr;
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
