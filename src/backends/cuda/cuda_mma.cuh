// bf16 tensor-core building blocks of the Newton-Schulz kernel that runs
// without cuBLAS (cuda_ns_fused.cu): ldmatrix operand
// loads from shared memory and the mma.sync m16n8k16 product, fp32
// accumulation. sm_80 and later; empty below, where that kernel is never
// chosen.
#pragma once
#include <cstdint>

namespace dmuon {

#if __CUDA_ARCH__ >= 800
// Four 8 x 8 bf16 matrices from shared memory, rows addressed by the lanes
// (ldmatrix); `trans` hands each lane a column pair instead of a row pair.
template <bool trans>
__device__ inline void load_x4(uint32_t (&r)[4], const uint16_t* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

// c (16 x 8, fp32) += a (16 x 16) b (16 x 8), bf16 operands.
__device__ inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

}  // namespace dmuon
