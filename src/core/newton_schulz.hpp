// The Newton-Schulz orthogonalisation, written once for every backend.
//
// For a k x n matrix X (k <= n; a tall matrix is transposed first), after
// Frobenius normalisation each iteration computes
//     A = X X^T,   B = b A + c A A,   X <- a X + B X
// with coefficients (a, b, c) from a schedule. The linear combinations are
// folded into the GEMMs' alpha/beta, so an iteration is three GEMMs and two
// copies. A backend supplies an Engine with
//     gemm(trans_b, M, N, K, alpha, A, B, beta, C)   // C = alpha A op(B) + beta C,
//                                                    // row-major, batched
//     copy(dst, src, elements)                       // batched
// over its own matrix handle type (fp32 on the CPU, bf16 on the GPU).
#pragma once
#include <utility>
#include <vector>

#include "dmuon/dmuon.h"

namespace dmuon {

struct NsCoefficients {
  float a, b, c;
};

// Coefficients for `steps` iterations of a dmuon_ns_schedule_t, and the
// factor applied to the Frobenius norm before normalising (Polar Express
// divides by 1.01 * norm to keep the spectrum inside its interval).
std::vector<NsCoefficients> ns_coefficients(int schedule, int steps);
double ns_norm_factor(int schedule);

// Runs the iterations on a batch of k x n matrices in X, using A and B (k x k)
// and Xn (k x n) as scratch. Returns the handle (X or Xn) holding the result.
template <class Engine, class Mat>
Mat newton_schulz_iterate(Engine& e, Mat X, Mat Xn, Mat A, Mat B, long k, long n,
                          const std::vector<NsCoefficients>& coeffs) {
  for (const NsCoefficients& c : coeffs) {
    e.gemm(true, k, k, n, 1.0f, X, X, 0.0f, A);     // A = X X^T
    e.copy(B, A, k * k);
    e.gemm(false, k, k, k, c.c, A, A, c.b, B);      // B = c A A + b A
    e.copy(Xn, X, k * n);
    e.gemm(false, k, n, k, 1.0f, B, X, c.a, Xn);    // Xn = B X + a X
    std::swap(X, Xn);
  }
  return X;
}

}  // namespace dmuon
