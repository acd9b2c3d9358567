#include "backends/cpu/cpu_newton_schulz.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_blas.hpp"
#include "core/error.hpp"

namespace dmuon {

namespace {

// Gram Newton-Schulz is chosen for shapes at least this many times wider than
// high: there it measured faster than the plain iteration, at twice as wide
// not (docs/decisions.md, "Performance").
constexpr long kCpuGramMinAspect = 3;

// A batch of same-shape matrices in one contiguous block: matrix i at data + i*stride.
struct HostBatch {
  float* data;
  long stride;
  bool operator==(const HostBatch& o) const { return data == o.data; }
};

// The Engine of newton_schulz_iterate on the host. BLAS already spreads one
// product over the cores, so "batched" is a loop over the matrices.
//
// Two of the iteration's three products are symmetric: A = X X^T, and A A
// (A is symmetric, so A A = A A^T). With SymmetricProduct::ssyrk both go
// through SYRK, which computes one triangle (half the flops) and is mirrored.
// The engine recognises them by tracking which handles hold a symmetric
// matrix: results of M M^T, copies of those, and beta-updates of those.
class HostEngine {
 public:
  HostEngine(int batch, long k, SymmetricProduct product) : batch_(batch), k_(k), product_(product) {}

  void gemm(bool trans_b, long M, long N, long K, float alpha, HostBatch A, HostBatch B, float beta, HostBatch C) {
    // A op(A) is A A^T when transposed, or A A for a symmetric A.
    const bool self_transpose = A == B && M == N && (trans_b || (M == K && symmetric(A.data)));
    // Adding beta C keeps the result symmetric only when C already is.
    const bool symmetric_result = self_transpose && (beta == 0.0f || symmetric(C.data));
    const bool syrk = symmetric_result && product_ == SymmetricProduct::ssyrk;
    for (int i = 0; i < batch_; ++i) {
      const float* a = A.data + i * A.stride;
      const float* b = B.data + i * B.stride;
      float* c = C.data + i * C.stride;
      if (syrk)
        ssyrk_row_major(static_cast<int>(M), static_cast<int>(K), alpha, a, beta, c);
      else
        sgemm_row_major(trans_b, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, a, b, beta, c);
    }
    mark(C.data, symmetric_result);
  }

  void copy(HostBatch dst, HostBatch src, long elements) {
    const std::size_t bytes = static_cast<std::size_t>(elements) * sizeof(float);
    if (dst.stride == elements && src.stride == elements) {  // contiguous: one pass
      std::memcpy(dst.data, src.data, bytes * static_cast<std::size_t>(batch_));
    } else {
      for (int i = 0; i < batch_; ++i) std::memcpy(dst.data + i * dst.stride, src.data + i * src.stride, bytes);
    }
    mark(dst.data, symmetric(src.data));
  }

  // The j-th batch of k x k matrices in a buffer of k x n ones (the Gram iteration's scratch).
  HostBatch slice(HostBatch big, long j) const { return HostBatch{big.data + j * batch_ * k_ * k_, k_ * k_}; }

  // One thread runs everything in order: nothing runs beside it.
  bool concurrent() const { return false; }
  void fork() {}
  void rejoin() {}
  void join() {}

  // X is normalised before the iteration (cpu_newton_schulz): the input's scale is 1.
  void gemm_input(bool trans_b, long M, long N, long K, int /*power*/, HostBatch A, HostBatch B, HostBatch C) {
    gemm(trans_b, M, N, K, 1.0f, A, B, 0.0f, C);
  }
  void gemm_result(long M, long N, long K, int power, HostBatch A, HostBatch B, HostBatch C) {
    gemm_input(false, M, N, K, power, A, B, C);
  }

  // M += alpha I; a symmetric M stays symmetric.
  void add_identity(HostBatch M, float alpha, long k) {
    for (int i = 0; i < batch_; ++i)
      for (long d = 0; d < k; ++d) M.data[i * M.stride + d * (k + 1)] += alpha;
  }

 private:
  bool symmetric(const float* p) const { return std::find(sym_.begin(), sym_.end(), p) != sym_.end(); }
  void mark(const float* p, bool is_symmetric) {
    sym_.erase(std::remove(sym_.begin(), sym_.end(), p), sym_.end());
    if (is_symmetric) sym_.push_back(p);
  }

  int batch_;
  long k_;
  SymmetricProduct product_;
  std::vector<const float*> sym_;  // handles now holding symmetric matrices (at most six)
};

}  // namespace

std::size_t cpu_ns_workspace_floats(int batch, long k, long n) {
  return static_cast<std::size_t>(batch) * (2 * static_cast<std::size_t>(k) * n + 2 * static_cast<std::size_t>(k) * k);
}

NsIteration cpu_ns_iteration(long k, long n) {
  return n >= kCpuGramMinAspect * k ? NsIteration::gram : NsIteration::plain;
}

float* cpu_newton_schulz(float* work, int batch, long k, long n, const std::vector<NsCoefficients>& coeffs,
                         double norm_factor, float eps, SymmetricProduct product, NsIteration iteration) {
  require(k >= 1 && k <= n && n <= INT_MAX && k * n <= INT_MAX, DMUON_ERR_NOT_SUPPORTED,
          "Newton-Schulz on the CPU: a matrix of " + std::to_string(k) + " x " + std::to_string(n) +
              " is beyond the BLAS integer range");
  require(iteration == NsIteration::plain || gram_ns_fits(k, n), DMUON_ERR_NOT_SUPPORTED,
          "Gram Newton-Schulz needs a matrix at least twice as wide as high, not " + std::to_string(k) + " x " +
              std::to_string(n));
  const long kn = k * n, kk = k * k;
  float* x = work;
  HostBatch X{x, kn}, Xn{x + batch * kn, kn}, A{x + 2 * batch * kn, kk}, B{x + 2 * batch * kn + batch * kk, kk};

  // Frobenius normalisation as torch.optim.Muon: divide by the norm clamped
  // from below by eps (a zero update stays zero instead of becoming NaN). The
  // sum is in double so the norm does not depend on the matrix size's rounding.
  for (int i = 0; i < batch; ++i) {
    float* m = x + i * kn;
    double sumsq = 0.0;
    for (long e = 0; e < kn; ++e) sumsq += static_cast<double>(m[e]) * m[e];
    const double denom = std::max(norm_factor * std::sqrt(sumsq), static_cast<double>(eps));
    const float scale = static_cast<float>(1.0 / denom);
    for (long e = 0; e < kn; ++e) m[e] *= scale;
  }

  HostEngine engine(batch, k, product);
  if (iteration == NsIteration::gram) return gram_newton_schulz_iterate(engine, X, Xn, A, B, k, n, coeffs).data;
  return newton_schulz_iterate(engine, X, Xn, A, B, k, n, coeffs).data;
}

}  // namespace dmuon
