// The two BLAS routines the CPU backend uses, called through the Fortran
// interface (present in every BLAS: OpenBLAS, MKL, BLIS, the reference one),
// and row-major wrappers over them.
//
// Row-major from a column-major BLAS: a row-major M x N matrix is the
// column-major N x M matrix of the same memory, so C = A op(B) in row-major is
// C^T = op(B)^T A^T in column-major: swap the operands and M with N, no copy.
#pragma once
#include <algorithm>
#include <cstddef>

extern "C" {
// The trailing size_t arguments are the hidden lengths gfortran passes for
// CHARACTER arguments; a BLAS written in C ignores them, a Fortran one needs them.
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc, std::size_t transa_len, std::size_t transb_len);
void ssyrk_(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha, const float* a,
            const int* lda, const float* beta, float* c, const int* ldc, std::size_t uplo_len,
            std::size_t trans_len);
}

namespace dmuon {

// Row-major C (M x N) = alpha A (M x K) op(B) + beta C, where op(B) is B
// (K x N) or, with trans_b, B^T for B stored N x K. Dimensions must fit an int.
inline void sgemm_row_major(bool trans_b, int M, int N, int K, float alpha, const float* A, const float* B,
                            float beta, float* C) {
  const char tb = trans_b ? 'T' : 'N', ta = 'N';
  const int ldb = trans_b ? K : N, lda = K, ldc = N;
  sgemm_(&tb, &ta, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc, 1, 1);
}

// Row-major C (M x M) = alpha A A^T + beta C for A stored M x K, full matrix:
// SYRK writes one triangle, which is then mirrored into the other.
inline void ssyrk_row_major(int M, int K, float alpha, const float* A, float beta, float* C) {
  // A row-major M x K is column-major K x M (lda = K): A A^T = op(A)^T op(A) with trans 'T'.
  const char uplo = 'U', trans = 'T';
  ssyrk_(&uplo, &trans, &M, &K, &alpha, A, &K, &beta, C, &M, 1, 1);
  // Column-major upper (i <= j at C[i + j M]) is row-major lower: copy it up,
  // in tiles so that the strided reads stay in cache.
  constexpr int tile = 32;
  for (int r0 = 0; r0 < M; r0 += tile)
    for (int c0 = r0; c0 < M; c0 += tile)
      for (int r = r0; r < std::min(M, r0 + tile); ++r)
        for (int c = std::max(c0, r + 1); c < std::min(M, c0 + tile); ++c)
          C[static_cast<std::size_t>(r) * M + c] = C[static_cast<std::size_t>(c) * M + r];
}

}  // namespace dmuon
