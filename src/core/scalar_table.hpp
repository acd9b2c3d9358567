// The per-parameter scalar table of the replicated AdamW update: the single
// home of its layout, read by the CPU loop and the CUDA kernel alike.
//
// The host writes one AdamScalarRow per Adam parameter each step (hyper-
// parameters already multiplied by the parameter's lr_mul / wd_mul, and the
// active flag). The bias corrections depend on the parameter's own step count,
// which lives in backend memory and advances only when the row is active and
// the step is not skipped by the non-finite guard; so the derived scalars are
// computed on the backend by adam_derive(), and no host synchronisation is
// needed to know whether the previous step was skipped.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.hpp"

namespace dmuon {

struct AdamScalarRow {
  int64_t offset;   // first element in its dtype's flat buffers
  int64_t numel;    // elements of the parameter
  int32_t dtype;    // Dtype of the parameter
  int32_t active;   // 0: no gradient this step, the parameter is skipped whole
  float beta1;
  float beta2;
  float eps;
  float lr;            // group lr * lr_mul
  float weight_decay;  // group weight decay * wd_mul
  float pad_;
};

// Scalars the element loop needs, derived from a row and its step count.
struct AdamDerived {
  float decay;               // 1 - lr * weight_decay (decoupled decay)
  float one_minus_beta1;
  float one_minus_beta2;
  float step_size;           // lr / (1 - beta1^t)
  float inv_sqrt_bias2;      // 1 / sqrt(1 - beta2^t)
};

// `step` is the parameter's step count including the current step (t >= 1).
DMUON_HD AdamDerived adam_derive(const AdamScalarRow& r, int64_t step) {
  AdamDerived d;
  const double t = static_cast<double>(step);
  d.decay = static_cast<float>(1.0 - static_cast<double>(r.lr) * r.weight_decay);
  d.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(r.beta1));
  d.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(r.beta2));
  d.step_size = static_cast<float>(r.lr / (1.0 - pow(static_cast<double>(r.beta1), t)));
  d.inv_sqrt_bias2 = static_cast<float>(1.0 / sqrt(1.0 - pow(static_cast<double>(r.beta2), t)));
  return d;
}

// One element of torch.optim.AdamW, in its order: decay, moments, update.
// `g` is the averaged gradient already multiplied by the clip coefficient.
DMUON_HD float adam_element(float p, float g, float& m, float& v, const AdamScalarRow& r,
                            const AdamDerived& d) {
  p *= d.decay;
  m = r.beta1 * m + d.one_minus_beta1 * g;
  v = r.beta2 * v + d.one_minus_beta2 * g * g;
  const float denom = sqrtf(v) * d.inv_sqrt_bias2 + r.eps;
  return p - d.step_size * (m / denom);
}

}  // namespace dmuon
