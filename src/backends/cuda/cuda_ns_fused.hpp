// Newton-Schulz of small matrices in one kernel (cuda_ns_fused.cu). The
// models simulations train have hidden matrices of 64 or so: there the three
// cuBLAS GEMMs of an iteration each cost a launch and a tail far longer than
// their arithmetic, and fifteen of them were most of a step's device time
// (docs/decisions.md, "Small matrices: Newton-Schulz in one kernel"). The
// fused kernel normalises and iterates each matrix of a shape's batch in one
// block's shared memory. Same arithmetic as the GEMM path (bf16 operands,
// fp32 accumulation, bf16 results); only the summation order differs.
#pragma once
#include <cstdint>
#include <vector>

#include "core/newton_schulz.hpp"

namespace dmuon {

struct CudaStepState;
struct ShapeWork;

// The largest min(rows, cols) and max(rows, cols) the fused kernel takes: one
// block's tensor cores finish such a matrix's iteration in about the time of
// one GEMM launch; larger shapes go to the GEMMs, spread over the device.
constexpr int64_t kNsFusedMaxK = 64, kNsFusedMaxN = 128;

// Whether the fused kernel runs a rows x cols shape on the current device
// (it needs bf16 tensor cores, sm_80).
bool ns_fused_fits(int64_t rows, int64_t cols);

// Normalises the batch in w.X (the momentum pass's partial sums of squares,
// divided by max(norm_factor * norm, eps), as the normalisation kernel does),
// runs `coeffs` iterations and writes the result back to w.X, which it
// returns. Needs w.fused. Enqueued on st.stream.
uint16_t* ns_fused_iterate(CudaStepState& st, ShapeWork& w, const std::vector<NsCoefficients>& coeffs,
                           float norm_factor, float eps);

}  // namespace dmuon
