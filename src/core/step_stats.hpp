// Statistics of one step that stay in backend memory (host memory for the CPU
// backend, device memory for CUDA): written by the step, read only when the
// user asks (dmuon_get_clip_stats). Also the device-resident step guard.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.hpp"

namespace dmuon {

struct StepStats {
  double sumsq;        // this rank's contribution, then (after the all-reduce) the global sum
  double total_norm;   // sqrt(sumsq); -1 when no norm was computed this step
  double clip_coef;    // factor applied to every gradient this step (clip and 1/accumulation)
  int32_t clipped;
  int32_t found_inf;
  int32_t skip;        // 1: this step changes nothing (skip_nonfinite and found_inf)
  int32_t grad_accumulation;  // micro-batches summed in the gradient buffers; 0 or 1: none
  int64_t steps_taken; // optimizer steps applied (skipped ones not counted)
};

// 1 / the micro-batches summed in the gradient buffers: the factor that turns
// their sum into the mean (dmuon_set_grad_accumulation).
DMUON_HD double accumulation_scale(const StepStats& s) {
  return s.grad_accumulation > 1 ? 1.0 / s.grad_accumulation : 1.0;
}

// Called once the global sum of squares is known; the same on every backend.
// Clipping follows torch.nn.utils.clip_grad_norm_: coef = max_norm/(norm+1e-6),
// on the norm of the mean gradient; the mean's 1/micro-batches is folded into
// the factor the updates apply, so accumulation needs no pass of its own.
DMUON_HD void finish_step_stats(StepStats& s, double max_norm, int skip_nonfinite, int norm_computed) {
  const double scale = accumulation_scale(s);
  if (!norm_computed) {
    s.total_norm = -1.0;
    s.clip_coef = scale;
    s.clipped = 0;
    s.found_inf = 0;
    s.skip = 0;
  } else {
    s.total_norm = sqrt(s.sumsq) * scale;
    // x - x is 0 for finite x and NaN for inf and NaN (same on host and device).
    s.found_inf = (s.total_norm - s.total_norm == 0.0) ? 0 : 1;
    s.skip = (s.found_inf && skip_nonfinite) ? 1 : 0;
    double coef = 1.0;
    if (max_norm > 0.0 && !s.found_inf) {
      coef = max_norm / (s.total_norm + 1e-6);
      if (coef > 1.0) coef = 1.0;
    }
    s.clip_coef = coef * scale;
    s.clipped = coef < 1.0 ? 1 : 0;
  }
  if (!s.skip) s.steps_taken += 1;
}

}  // namespace dmuon
