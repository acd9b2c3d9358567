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
#include <cstddef>
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

// Gram Newton-Schulz (Zhang, Amsel, Chen, Dao, 2026): the same polynomial in
// X X^T applied to X, but iterated on the k x k Gram matrix instead of X.
// Every iterate is X_t = Q_t X_0 with Q_t a polynomial in R_0 = X_0 X_0^T, so
// with Z = b R + c R R (R = X_t X_t^T):
//     Q <- Q Z + a Q             (Q_0 = I, so the first Q is Z + a I)
//     R <- (Z + a I) R (Z + a I) = Z T + a T,  T = R Z + a R
// and X is touched only to form R_0 and to apply Q at the end. Q grows large
// along the small singular directions, so in finite precision the iteration
// restarts (X <- Q X, R <- X X^T, Q <- I) after iteration gram_ns_restarts_at
// allows; the authors restart after the second of five.
//
// Flops per matrix (full GEMMs): 2k^2n for R_0, 4k^2n per restart (Q X and
// its Gram), 2k^2n for the final Q X; per iteration 2k^3 for Z, 2k^3 for Q
// (not in a fresh start) and 4k^3 for R (not before a restart or at the end).
// Plain: (4k^2n + 2k^3) per iteration. For five iterations: 8k^2n + 28k^3
// against 20k^2n + 10k^3, fewer flops once n > 1.5 k.

// Iteration i (0-based) starts with a restart: the second and then every
// third, so five iterations restart once (as the authors' default) and a long
// Polar Express schedule never runs more than three on one Q.
inline bool gram_ns_restarts_at(std::size_t i) { return i >= 2 && (i - 2) % 3 == 0; }

// The Gram iteration keeps its four k x k matrices in A, B and the k x n
// scratch Xn (two of them, contiguous over the batch), which needs n >= 2k.
inline bool gram_ns_fits(long k, long n) { return 2 * k <= n; }

// Q's update runs beside R's (gram_newton_schulz_iterate) where Xn holds a
// third k x k matrix per batch entry.
inline bool gram_ns_fits_beside(long k, long n) { return 3 * k <= n; }

// GEMM-counted flops per matrix of `steps` iterations, plain and Gram.
inline double ns_plain_flops(long k, long n, int steps) {
  return steps * (4.0 * k * k * static_cast<double>(n) + 2.0 * k * k * static_cast<double>(k));
}
inline double ns_gram_flops(long k, long n, int steps) {
  const double k2n = static_cast<double>(k) * k * n, k3 = static_cast<double>(k) * k * k;
  double f = 2 * k2n + 2 * k2n;  // R_0 and the final Q X
  bool fresh = true;
  for (int i = 0; i < steps; ++i) {
    if (i > 0 && gram_ns_restarts_at(static_cast<std::size_t>(i))) {
      f += 4 * k2n;
      fresh = true;
    }
    f += 2 * k3 + (fresh ? 0 : 2 * k3);
    fresh = false;
    if (i + 1 < steps && !gram_ns_restarts_at(static_cast<std::size_t>(i) + 1)) f += 4 * k3;
  }
  return f;
}

// The Gram iteration over the same Engine, plus
//     slice(big, j)              // the j-th batch of k x k matrices in a k x n buffer
//     add_identity(M, alpha, k)  // M += alpha I, batched
//     concurrent()               // true: the engine can run work beside its main order
//     fork()                     // what follows, until rejoin(), runs beside the main order
//     rejoin()                   // back to the main order; the work beside it goes on
//     join()                     // the main order waits for the work beside it so far
//     gemm_input(trans_b, M, N, K, power, A, B, C)   // C = s^power A op(B), beta 0
//     gemm_result(M, N, K, power, A, B, C)           // the last product, C = s^power A B
// (an engine without a second stream answers false and does nothing).
// gemm_input is a product that reads the input X as the engine handed it
// over: an engine may leave the Frobenius normalisation X <- s X to the two
// products that read the input (R_0 = s^2 X X^T and the first Q X = s Q X),
// saving a pass over k x n; one that normalised X beforehand uses s = 1.
// gemm_result may also apply the Muon update to the parameter itself (the
// CUDA engine, for one matrix), saving the pass that reads the result.
// Q's update needs only Q and this iteration's Z, and nothing of the
// iteration reads it, so where R is updated too (two products) and a third
// k x k slice of Xn fits (n >= 3k) it runs beside R's update, off the
// critical path; it must finish before the next Z overwrites this one.
// X holds the input (normalised, or scaled in gemm_input) and is
// overwritten; returns the handle holding the result (X or Xn). Needs
// gram_ns_fits(k, n).
template <class Engine, class Mat>
Mat gram_newton_schulz_iterate(Engine& e, Mat X, Mat Xn, Mat A, Mat B, long k, long n,
                               const std::vector<NsCoefficients>& coeffs) {
  const long kk = k * k;
  const bool beside = e.concurrent() && gram_ns_fits_beside(k, n);
  Mat Q = A, T = B;
  Mat R = e.slice(Xn, 0), Z = e.slice(Xn, 1);
  e.gemm_input(true, k, k, n, 2, X, X, R);              // R = X X^T
  bool fresh = true;                                    // Q = I
  bool input = true;                                    // X is still the input
  for (std::size_t i = 0; i < coeffs.size(); ++i) {
    const NsCoefficients& c = coeffs[i];
    e.join();                                           // Q's last update read Z
    if (i > 0 && gram_ns_restarts_at(i)) {              // R and Z in Xn are dead here
      e.gemm_input(false, k, n, k, input ? 1 : 0, Q, X, Xn);  // X = Q X
      input = false;
      std::swap(X, Xn);
      R = e.slice(Xn, 0);
      Z = e.slice(Xn, 1);
      e.gemm(true, k, k, n, 1.0f, X, X, 0.0f, R);
      fresh = true;
    }
    e.copy(Z, R, kk);
    e.gemm(false, k, k, k, c.c, R, R, c.b, Z);          // Z = c R R + b R
    const bool r_update = i + 1 < coeffs.size() && !gram_ns_restarts_at(i + 1);
    if (beside && r_update) e.fork();
    if (fresh) {
      e.copy(Q, Z, kk);
      e.add_identity(Q, c.a, k);                        // Q = Z + a I
      fresh = false;
    } else {
      e.copy(T, Q, kk);
      e.gemm(false, k, k, k, 1.0f, Q, Z, c.a, T);       // T = Q Z + a Q
      std::swap(Q, T);
    }
    if (!r_update) continue;
    if (beside) e.rejoin();
    const Mat U = beside ? e.slice(Xn, 2) : T;          // T may still be written beside
    e.copy(U, R, kk);
    e.gemm(false, k, k, k, 1.0f, R, Z, c.a, U);         // U = R Z + a R
    e.copy(R, U, kk);
    e.gemm(false, k, k, k, 1.0f, Z, U, c.a, R);         // R = Z U + a U
  }
  e.join();
  e.gemm_result(k, n, k, input ? 1 : 0, Q, X, Xn);      // X = Q X
  return Xn;
}

}  // namespace dmuon
