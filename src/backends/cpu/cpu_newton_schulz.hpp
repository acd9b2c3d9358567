// Newton-Schulz on the host: the iteration of core/newton_schulz.hpp over an
// Engine that calls BLAS, batched over matrices of one shape. Used by the CPU
// Muon step (cpu_muon.cpp) and timed on its own by bench/bench_newton_schulz.
#pragma once
#include <cstddef>
#include <vector>

#include "core/newton_schulz.hpp"

namespace dmuon {

// How the iteration's symmetric products (X X^T, and A A for the symmetric A)
// are formed: general products, or symmetric rank-k updates (half the flops,
// another kernel; docs/decisions.md has the timing).
enum class SymmetricProduct { sgemm, ssyrk };

// What the CPU Muon step uses: SYRK, faster than sgemm for the same product
// at every benchmarked shape on OpenBLAS (docs/decisions.md, "CPU Muon"). Fixed rather than timed at run time, so that a run and its
// restart compute bit-identical updates.
constexpr SymmetricProduct kCpuSymmetricProduct = SymmetricProduct::ssyrk;

// Which iteration runs: the plain one, or Gram Newton-Schulz (core/newton_schulz.hpp),
// which needs gram_ns_fits(k, n).
enum class NsIteration { plain, gram };

// The CPU Muon step's choice for a k x n shape (k <= n): Gram where it measured
// faster on OpenBLAS (docs/decisions.md, "Performance"). A fixed rule of
// the shape, not a run-time timing, for the same reason as kCpuSymmetricProduct.
NsIteration cpu_ns_iteration(long k, long n);

// Floats of workspace for `batch` k x n matrices: X and Xn (k x n), A and B (k x k).
std::size_t cpu_ns_workspace_floats(int batch, long k, long n);

// `work` holds cpu_ns_workspace_floats(batch, k, n) floats, the first batch*k*n
// of them the input matrices (k <= n, matrix i at work + i*k*n). Each matrix is
// divided by max(norm_factor * ||X||_F, eps), then iterated with `coeffs`.
// Returns where the results lie (the first or second block of batch*k*n floats,
// same layout). Throws Error for dimensions beyond BLAS's int, and for Gram
// on a shape it does not fit.
float* cpu_newton_schulz(float* work, int batch, long k, long n, const std::vector<NsCoefficients>& coeffs,
                         double norm_factor, float eps, SymmetricProduct product,
                         NsIteration iteration = NsIteration::plain);

}  // namespace dmuon
