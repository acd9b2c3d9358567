#include "backends/cuda/cuda_programmatic_edges.hpp"

#include <cuda.h>

#include <cstdlib>
#include <cstring>

namespace dmuon {

#if CUDART_VERSION >= 12030

// Edges with data (a programmatic edge's port and type) came with CUDA 12.3 as
// the _v2 graph calls; CUDA 13 gave them the plain names.
#if CUDART_VERSION >= 13000
#define DMUON_EDGE_CALL(name) name
#else
#define DMUON_EDGE_CALL(name) name##_v2
#endif

namespace {

// The data of a programmatic edge: the successor may launch once every block
// of its predecessor has triggered (or exited).
cudaGraphEdgeData programmatic_edge() {
  cudaGraphEdgeData e = {};
  e.from_port = cudaGraphKernelNodePortProgrammatic;
  e.type = cudaGraphDependencyTypeProgrammatic;
  return e;
}

// A driver entry point, looked up once; null where the driver lacks it.
template <class F>
F driver_function(const char* symbol, unsigned version) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t rc = cudaGetDriverEntryPointByVersion(symbol, &f, version, cudaEnableDefault, &q);
#else
  (void)version;  // the runtime's own version picks the symbol's
  const cudaError_t rc = cudaGetDriverEntryPoint(symbol, &f, cudaEnableDefault, &q);
#endif
  if (rc != cudaSuccess || q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

std::string kernel_name(cudaGraphNode_t node) {
  const char* name = nullptr;
  cudaKernelNodeParams rp = {};
  const bool got = cudaGraphKernelNodeGetParams(node, &rp) == cudaSuccess;
  if (got && rp.func && cudaFuncGetName(&name, rp.func) == cudaSuccess && name) return name;
  if (!got || rp.func) (void)cudaGetLastError();  // the failed call's error only, not an earlier one
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

namespace {

// The top-level edges of a graph with their data; none if they cannot be read.
struct Edges {
  std::vector<cudaGraphNode_t> from, to;
  std::vector<cudaGraphEdgeData> data;
};
Edges edges_of(cudaGraph_t g) {
  Edges e;
  size_t n = 0;
  if (DMUON_EDGE_CALL(cudaGraphGetEdges)(g, nullptr, nullptr, nullptr, &n) != cudaSuccess) {
    (void)cudaGetLastError();
    return e;
  }
  e.from.resize(n), e.to.resize(n), e.data.resize(n);
  if (n && DMUON_EDGE_CALL(cudaGraphGetEdges)(g, e.from.data(), e.to.data(), e.data.data(), &n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  e.from.resize(n), e.to.resize(n), e.data.resize(n);
  return e;
}

}  // namespace

std::vector<GraphEdge> make_edges_programmatic(cudaGraph_t g, const std::function<bool(const std::string&)>& into) {
  std::vector<GraphEdge> changed;
  Edges edges = edges_of(g);
  std::vector<cudaGraphNode_t>&from = edges.from, &to = edges.to;
  std::vector<cudaGraphEdgeData>& data = edges.data;
  for (size_t i = 0; i < from.size(); ++i) {
    cudaGraphNodeType a = cudaGraphNodeTypeEmpty, b = cudaGraphNodeTypeEmpty;
    if (cudaGraphNodeGetType(from[i], &a) != cudaSuccess || cudaGraphNodeGetType(to[i], &b) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (a != cudaGraphNodeTypeKernel || b != cudaGraphNodeTypeKernel ||
        data[i].type != cudaGraphDependencyTypeDefault || !into(kernel_name(to[i])))
      continue;
    const cudaGraphEdgeData e = programmatic_edge();
    if (DMUON_EDGE_CALL(cudaGraphRemoveDependencies)(g, &from[i], &to[i], &data[i], 1) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (DMUON_EDGE_CALL(cudaGraphAddDependencies)(g, &from[i], &to[i], &e, 1) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)DMUON_EDGE_CALL(cudaGraphAddDependencies)(g, &from[i], &to[i], &data[i], 1);  // the edge as it was
      continue;
    }
    changed.push_back({from[i], to[i]});
  }
  return changed;
}

void make_edges_plain(cudaGraph_t g, const std::vector<GraphEdge>& edges) {
  const cudaGraphEdgeData e = programmatic_edge(), plain = {};
  for (const GraphEdge& x : edges) {
    (void)DMUON_EDGE_CALL(cudaGraphRemoveDependencies)(g, &x.from, &x.to, &e, 1);
    (void)DMUON_EDGE_CALL(cudaGraphAddDependencies)(g, &x.from, &x.to, &plain, 1);
  }
  (void)cudaGetLastError();
}

int programmatic_edges(cudaGraph_t g) {
  int count = 0;
  for (const cudaGraphEdgeData& d : edges_of(g).data) count += d.type == cudaGraphDependencyTypeProgrammatic;
  return count;
}

#else  // CUDA before 12.3: no edge data, so no programmatic edges

ProgrammaticEdges programmatic_edges_wanted() { return ProgrammaticEdges::none; }
std::string kernel_name(cudaGraphNode_t) { return {}; }
std::vector<GraphEdge> make_edges_programmatic(cudaGraph_t, const std::function<bool(const std::string&)>&) {
  return {};
}
void make_edges_plain(cudaGraph_t, const std::vector<GraphEdge>&) {}
int programmatic_edges(cudaGraph_t) { return 0; }

#endif

bool waits_for_prerequisites(const std::string& kernel, ProgrammaticEdges which) {
  if (which == ProgrammaticEdges::none || kernel.empty()) return false;
  // Every kernel of namespace dmuon starts with await_prerequisite_kernels().
  if (kernel.find("5dmuon") != std::string::npos) return true;
  // cuBLAS's nvjet kernels wait too (tests/gpu/test_cuda_pdl.cu shows it for
  // the products of Newton-Schulz's shapes; docs/decisions.md).
  return which == ProgrammaticEdges::into_dmuon_and_cublas_kernels && kernel.find("nvjet") != std::string::npos;
}

}  // namespace dmuon
