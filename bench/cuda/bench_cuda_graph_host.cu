// Where the host time of a replayed whole-step graph goes. For each Newton-Schulz
// shape of bench_cuda_ns (bf16, --count matrices), the host microseconds per
// call, median of 5 rounds of 6 calls enqueued behind a held stream, of:
//   step         dmuon_step, replaying the whole-step graph
//   plain        cudaGraphLaunch of that graph instantiated plainly
//   device       the same, instantiated for device launch (as the backend does
//                where the graph allows it)
//   chain        the nodes cloned, their edges replaced by one chain (plain)
//   empty        the graph's nodes and edges, every node an empty one-thread kernel
//   empty_chain  as many empty kernels, chained
// the device milliseconds per replay of plain and device (alternated, best
// of three rounds), and the graph's makeup: nodes by type (0 kernel, 1 copy,
// 2 memset), edges, nodes that join or fork, kernel nodes launched as
// thread-block clusters, edges that are not plain completion edges.
#include <boost/program_options.hpp>
#include <map>
#include <string>

#include "bench_backend.cuh"
#include "core/optimizer.hpp"

namespace {

__global__ void empty_kernel() {}

struct Edges {
  std::vector<cudaGraphNode_t> from, to;
  std::vector<char> special;  // not a plain completion edge (a programmatic one, say)
};

// CUDA 13 gives every edge its data; CUDA 12's calls of the same names take none.
Edges edges_of(cudaGraph_t g) {
  Edges e;
  size_t n = 0;
#if CUDART_VERSION >= 13000
  bench::cuda(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n), "cudaGraphGetEdges");
  std::vector<cudaGraphEdgeData> data(n);
  e.from.resize(n);
  e.to.resize(n);
  if (n) bench::cuda(cudaGraphGetEdges(g, e.from.data(), e.to.data(), data.data(), &n), "cudaGraphGetEdges");
  for (const cudaGraphEdgeData& d : data)
    e.special.push_back(d.type != cudaGraphDependencyTypeDefault || d.from_port != 0);
#else
  bench::cuda(cudaGraphGetEdges(g, nullptr, nullptr, &n), "cudaGraphGetEdges");
  e.from.resize(n);
  e.to.resize(n);
  if (n) bench::cuda(cudaGraphGetEdges(g, e.from.data(), e.to.data(), &n), "cudaGraphGetEdges");
  e.special.assign(n, 0);
#endif
  return e;
}

void add_edge(cudaGraph_t g, cudaGraphNode_t from, cudaGraphNode_t to) {
#if CUDART_VERSION >= 13000
  bench::cuda(cudaGraphAddDependencies(g, &from, &to, nullptr, 1), "cudaGraphAddDependencies");
#else
  bench::cuda(cudaGraphAddDependencies(g, &from, &to, 1), "cudaGraphAddDependencies");
#endif
}

void remove_edge(cudaGraph_t g, cudaGraphNode_t from, cudaGraphNode_t to) {
#if CUDART_VERSION >= 13000
  bench::cuda(cudaGraphRemoveDependencies(g, &from, &to, nullptr, 1), "cudaGraphRemoveDependencies");
#else
  bench::cuda(cudaGraphRemoveDependencies(g, &from, &to, 1), "cudaGraphRemoveDependencies");
#endif
}

// The graph's nodes in an order that respects every edge (Kahn's algorithm).
std::vector<cudaGraphNode_t> topological(cudaGraph_t g, const Edges& e) {
  size_t n = 0;
  cudaGraphGetNodes(g, nullptr, &n);
  std::vector<cudaGraphNode_t> nodes(n);
  cudaGraphGetNodes(g, nodes.data(), &n);
  std::map<cudaGraphNode_t, int> indegree;
  for (cudaGraphNode_t v : nodes) indegree[v] = 0;
  for (cudaGraphNode_t v : e.to) ++indegree[v];
  std::vector<cudaGraphNode_t> order;
  for (cudaGraphNode_t v : nodes)
    if (indegree[v] == 0) order.push_back(v);
  for (size_t i = 0; i < order.size(); ++i)
    for (size_t k = 0; k < e.from.size(); ++k)
      if (e.from[k] == order[i] && --indegree[e.to[k]] == 0) order.push_back(e.to[k]);
  return order;
}

void print_makeup(const std::string& tag, cudaGraph_t g, const Edges& e, const std::vector<cudaGraphNode_t>& order) {
  std::map<int, int> types;
  std::map<cudaGraphNode_t, int> in, out;
  int clusters = 0, special_edges = 0;
  for (cudaGraphNode_t v : order) {
    cudaGraphNodeType t;
    cudaGraphNodeGetType(v, &t);
    ++types[static_cast<int>(t)];
    if (t == cudaGraphNodeTypeKernel) {
      cudaLaunchAttributeValue a{};
      if (cudaGraphKernelNodeGetAttribute(v, cudaLaunchAttributeClusterDimension, &a) == cudaSuccess &&
          a.clusterDim.x * a.clusterDim.y * a.clusterDim.z > 1)
        ++clusters;
    }
  }
  for (size_t k = 0; k < e.from.size(); ++k) {
    ++out[e.from[k]];
    ++in[e.to[k]];
    special_edges += e.special[k];
  }
  int joins = 0, forks = 0;
  for (const auto& kv : in) joins += kv.second > 1;
  for (const auto& kv : out) forks += kv.second > 1;
  std::printf("MAKEUP %s nodes=%zu edges=%zu joins=%d forks=%d cluster_kernels=%d special_edges=%d types:", tag.c_str(),
              order.size(), e.from.size(), joins, forks, clusters, special_edges);
  for (const auto& kv : types) std::printf(" %d:%d", kv.first, kv.second);
  std::printf("\n");
  bench::result(tag + "_nodes", static_cast<double>(order.size()));
  bench::result(tag + "_joins", joins);
  bench::result(tag + "_cluster_kernels", clusters);
}

cudaGraphExec_t instantiate(cudaGraph_t g) {
  cudaGraphExec_t x = nullptr;
  bench::cuda(cudaGraphInstantiate(&x, g, 0), "cudaGraphInstantiate");
  return x;
}

// The clone of `g` whose edges are one chain in `order`.
cudaGraph_t chained_clone(cudaGraph_t g, const Edges& e, const std::vector<cudaGraphNode_t>& order) {
  cudaGraph_t c = nullptr;
  bench::cuda(cudaGraphClone(&c, g), "cudaGraphClone");
  auto in_clone = [&](cudaGraphNode_t v) {
    cudaGraphNode_t w = nullptr;
    bench::cuda(cudaGraphNodeFindInClone(&w, v, c), "cudaGraphNodeFindInClone");
    return w;
  };
  for (size_t k = 0; k < e.from.size(); ++k) remove_edge(c, in_clone(e.from[k]), in_clone(e.to[k]));
  for (size_t i = 1; i < order.size(); ++i) add_edge(c, in_clone(order[i - 1]), in_clone(order[i]));
  return c;
}

// A graph of empty kernels: one per node of `order`, with the edges of `e`
// (or, when `chain`, one chain in that order).
cudaGraph_t empty_graph(const Edges& e, const std::vector<cudaGraphNode_t>& order, bool chain) {
  cudaGraph_t c = nullptr;
  bench::cuda(cudaGraphCreate(&c, 0), "cudaGraphCreate");
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(empty_kernel);
  p.gridDim = dim3(1);
  p.blockDim = dim3(1);
  std::map<cudaGraphNode_t, cudaGraphNode_t> made;
  cudaGraphNode_t last = nullptr;
  for (cudaGraphNode_t v : order) {
    std::vector<cudaGraphNode_t> deps;
    if (chain) {
      if (last) deps.push_back(last);
    } else {
      for (size_t k = 0; k < e.to.size(); ++k)
        if (e.to[k] == v) deps.push_back(made.at(e.from[k]));
    }
    bench::cuda(cudaGraphAddKernelNode(&last, c, deps.data(), deps.size(), &p), "cudaGraphAddKernelNode");
    made[v] = last;
  }
  return c;
}

void measure(const std::string& tag, cudaStream_t stream, cudaGraphExec_t x) {
  bench::cuda(cudaGraphUpload(x, stream), "cudaGraphUpload");
  bench::cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const bench::Run::HostCost h = bench::held_host_cost(
      stream, [&] { bench::cuda(cudaGraphLaunch(x, stream), "cudaGraphLaunch"); }, 6, 5);
  bench::result(tag + "_host_us", h.median_us);
}

// Device milliseconds per replay of `x`, over `reps` replays.
double replay_ms(cudaStream_t stream, cudaGraphExec_t x, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  bench::cuda(cudaGraphLaunch(x, stream), "cudaGraphLaunch");
  bench::cuda(cudaEventRecord(a, stream), "cudaEventRecord");
  for (int i = 0; i < reps; ++i) bench::cuda(cudaGraphLaunch(x, stream), "cudaGraphLaunch");
  bench::cuda(cudaEventRecord(b, stream), "cudaEventRecord");
  bench::cuda(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  namespace po = boost::program_options;
  po::options_description desc("bench_cuda_graph_host: the host time of a replayed whole-step graph, taken apart");
  int count = 1;
  std::string only;
  desc.add_options()("help", "this text")("count", po::value(&count)->default_value(1), "matrices of each shape")(
      "shape", po::value(&only)->default_value(""), "only this shape, e.g. 4096x16384");
  if (!bench::parse_options(argc, argv, desc)) {
    MPI_Finalize();
    return 0;
  }
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {768, 768}, {768, 3072}, {2048, 2048}, {4096, 4096}, {4096, 16384}};
  for (const auto& s : shapes) {
    const std::string name = std::to_string(s.first) + "x" + std::to_string(s.second);
    if (!only.empty() && only != name) continue;
    std::vector<bench::Param> params;
    for (int i = 0; i < count; ++i)
      params.push_back({"m" + std::to_string(i), DMUON_KIND_MUON, DMUON_DTYPE_BF16, {s.first, s.second}});
    const std::string tag = "graph_" + name + "_n" + std::to_string(count);
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    o.cuda_step_graph = 1;
    bench::Run run(params, o);
    run.ms_per_step(4, 2);  // eager warm-up, capture, replays
    bench::result(tag + "_step_host_us", run.host_cost(6, 5).median_us);
    dmuon::CudaBackend* backend = bench::backend_of(run);
    const dmuon::CudaBackend::Diagnostics d = backend->diagnostics(run.opt->impl.step_state());
    auto g = static_cast<cudaGraph_t>(d.step_graph);
    if (!g) {
      std::printf("MAKEUP %s: no whole-step graph\n", tag.c_str());
      continue;
    }
    const Edges e = edges_of(g);
    const std::vector<cudaGraphNode_t> order = topological(g, e);
    print_makeup(tag, g, e, order);
    cudaGraphExec_t plain = instantiate(g), device = nullptr;
    const cudaError_t drc = cudaGraphInstantiateWithFlags(&device, g, cudaGraphInstantiateFlagDeviceLaunch);
    measure(tag + "_plain", run.stream, plain);
    if (drc == cudaSuccess) {
      measure(tag + "_device", run.stream, device);
      const int reps = s.first * s.second * count > (int64_t{1} << 26) ? 5 : 20;
      double best[2] = {1e30, 1e30};
      for (int round = 0; round < 3; ++round)
        for (int k : {0, 1}) best[k] = std::min(best[k], replay_ms(run.stream, k ? device : plain, reps));
      bench::result(tag + "_plain_ms", best[0]);
      bench::result(tag + "_device_ms", best[1]);
      cudaGraphExecDestroy(device);
    } else {
      std::printf("MAKEUP %s: no device launch: %s\n", tag.c_str(), cudaGetErrorString(drc));
      cudaGetLastError();
    }
    cudaGraphExecDestroy(plain);
    struct Variant {
      const char* name;
      cudaGraph_t graph;
    };
    for (Variant v : {Variant{"chain", chained_clone(g, e, order)}, Variant{"empty", empty_graph(e, order, false)},
                      Variant{"empty_chain", empty_graph(e, order, true)}}) {
      cudaGraphExec_t x = instantiate(v.graph);
      measure(tag + "_" + v.name, run.stream, x);
      cudaGraphExecDestroy(x);
      cudaGraphDestroy(v.graph);
    }
  }
  MPI_Finalize();
  return 0;
}
