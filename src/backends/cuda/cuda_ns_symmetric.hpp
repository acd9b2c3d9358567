// The symmetric products of Newton-Schulz on the CUDA backend. An iteration
// forms A = X X^T and B = b A + c A A; both are symmetric. With the k rows
// split into p row blocks of k/p rows, only the p(p+1)/2 blocks on and below
// the diagonal are computed, by one pointer-array batched matmul over all of
// them and all matrices of the batch (cuBLASLt, or cublasGemmBatchedEx where
// cuBLASLt offers no algorithm), then a small kernel copies each block below
// the diagonal, transposed, into its mirror above (B X reads the whole B).
// The pointer arrays are built once per shape at fixed device addresses, so
// the products capture into CUDA graphs and replay like the plain ones. No
// split-K atomics: the result is deterministic and replay equals eager bit
// for bit. Flops of a symmetric product: (p+1)/(2p) of the plain one.
#pragma once
#include <cstdint>

#include "backends/cuda/cuda_state.hpp"

namespace dmuon {

// Row-block counts the symmetric products may use.
constexpr int kSymBlockCounts[] = {2, 4, 8};

// p row blocks of a k x k product are possible when they are equal (k % p ==
// 0) and each is a multiple of 8 rows of at least 16: every block pointer
// then stays 16-byte aligned, which the bf16 tensor-core kernels need. Other
// shapes use the plain product.
bool sym_blocks_possible(long k, int p);

// Builds the pointer arrays and plans of shape `w` (its workspaces X, Xn, A,
// B) for p row blocks: allocates and uploads them (on st.stream), so it runs
// at a shape's first use, never inside a capture. Throws Error.
SymShapePtr make_sym_shape(CudaStepState& st, const ShapeWork& w, int p);

// Whether P is the Newton-Schulz matrix operand of a product (X or Xn) or the
// symmetric A, as the plan knows them.
bool sym_knows(const SymShape& s, const uint16_t* P, const uint16_t* c_in, const uint16_t* C);

// C = alpha P P^T + beta c_in over the whole batch, P being X or Xn (c_in
// unused, beta 0) or A (c_in = A, C = B). P is k x K in the engine's frame:
// row-major (X of a wide matrix, and A), or column-major (X of a tall matrix).
// Enqueued on st.stream. Only for (P, c_in, C) that sym_knows. `algo` picks
// among the plan's candidate algorithms (0: the heuristic's first); a non-null
// `record` receives the call, for the algorithm timing.
void sym_product(CudaStepState& st, SymShape& s, const uint16_t* P, float alpha, float beta, const uint16_t* c_in,
                 uint16_t* C, int algo = 0, NsGemmCall* record = nullptr);

}  // namespace dmuon
