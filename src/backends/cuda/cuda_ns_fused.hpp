// A small matrix's whole Muon step in one kernel (cuda_ns_fused.cu). The
// models simulations train have hidden matrices of 64 or so: there the three
// cuBLAS GEMMs of an iteration each cost a launch and a tail far longer than
// their arithmetic, and fifteen of them were most of a step's device time
// (docs/decisions.md, "Small matrices: the whole Muon step in one kernel"). The
// fused kernel runs momentum, normalisation, the iterations and the update of
// each matrix of a shape's batch in one block's shared memory. Same arithmetic
// as the separate passes and the GEMM path (bf16 operands, fp32 accumulation,
// bf16 results); only the summation orders differ.
#pragma once
#include <cstdint>
#include <vector>

#include "core/newton_schulz.hpp"

namespace dmuon {

struct CudaStepState;
struct ShapeWork;
struct MuonMatrix;
struct StepStats;

// The largest min(rows, cols) and max(rows, cols) the fused kernel takes: one
// block's tensor cores finish such a matrix's iteration in about the time of
// one GEMM launch; larger shapes go to the GEMMs, spread over the device.
constexpr int64_t kNsFusedMaxK = 64, kNsFusedMaxN = 128;

// Whether the fused kernel runs a rows x cols shape on the current device
// (it needs bf16 tensor cores, sm_80).
bool ns_fused_fits(int64_t rows, int64_t cols);

// What the fused step reads and writes besides the shape's work: the buffers
// of the batch's dtype and the step's staged scalars.
struct NsFusedStep {
  const void* grad;           // float or bf16 (uint16_t), as the batch's dtype
  void* param;
  float* momentum;
  float* master;              // bf16 with master weights, else null
  const MuonMatrix* mats;     // the batch's matrices (device)
  const float* momentum_coef; // the staged momentum factor (device)
  const StepStats* stats;     // clip coefficient and skip flag (device)
  int nesterov;
};

// Momentum as momentum_kernel, normalisation as normalise_kernel (dividing by
// max(norm_factor * norm, eps)), `coeffs` iterations, and the update as
// update_kernel, for every matrix of the batch; an inactive or skipped matrix
// is left untouched. Needs w.fused. Enqueued on st.stream.
void ns_fused_step(CudaStepState& st, const ShapeWork& w, const NsFusedStep& s,
                   const std::vector<NsCoefficients>& coeffs, float norm_factor, float eps);

}  // namespace dmuon
