// A mid-size matrix's whole Muon step in one kernel, a thread-block cluster
// per matrix (cuda_ns_cluster.cu). A hidden matrix of 256 x 256 does not fit
// one block's shared memory (cuda_ns_fused.hpp), and on the GEMMs its fifteen
// products each cost a launch and a tail far longer than their arithmetic
// (docs/decisions.md, "Mid-size matrices: a cluster per matrix"). Here each
// block of the cluster owns 64 x 64 tiles of every product, reads the operands
// its peers wrote from L2 and meets them at the cluster's barrier between
// products. Same arithmetic as the separate passes and the GEMM path (bf16
// operands, fp32 accumulation, bf16 results); only the summation orders differ.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_ns_fused.hpp"

namespace dmuon {

// The largest max(rows, cols) the cluster kernel takes: sixteen 64 x 64 tiles
// per product, the most blocks a cluster can have on sm_90.
constexpr int64_t kNsClusterMaxN = 256;

// Whether a rows x cols shape is one the cluster kernel is written for: too
// large for the fused kernel, at most kNsClusterMaxN each way, both sides a
// multiple of 8 (its operands move in 16-byte pieces). Pure: no device asked.
bool ns_cluster_shape(int64_t rows, int64_t cols);

// Blocks per matrix the cluster kernel would use for `count` matrices of the
// shape on the current device, or 0 where it does not run them: not asked
// for (DMUON_NS_CLUSTER=1 in the environment: opt-in until the kernel has
// been run on a GPU, docs/decisions.md), not a cluster shape, no clusters
// (sm_90 needed), or not all `count` clusters on the device at once (a larger
// batch keeps the GEMMs, which spread it over the whole device).
int ns_cluster_blocks(int64_t rows, int64_t cols, int count);

// As ns_fused_step, for a shape with w.cluster blocks per matrix; uses the
// shape's workspaces (X, Xn, A, B). Enqueued on st.stream.
void ns_cluster_step(CudaStepState& st, const ShapeWork& w, const NsFusedStep& s,
                     const std::vector<NsCoefficients>& coeffs, float norm_factor, float eps);

}  // namespace dmuon
