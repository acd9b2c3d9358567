#include "core/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace dmuon {

void validate_lr_schedule(const dmuon_lr_schedule_t& s, const char* call) {
  const std::string c = call;
  const auto finite_nonneg = [](double x) { return std::isfinite(x) && x >= 0; };
  require(s.kind >= DMUON_LR_CONSTANT && s.kind <= DMUON_LR_POLYNOMIAL, DMUON_ERR_INVALID_VALUE,
          c + ": kind " + std::to_string(s.kind) + " is not a dmuon_lr_schedule_kind_t");
  require(std::isfinite(s.base_lr), DMUON_ERR_INVALID_VALUE, c + ": base_lr must be finite");
  require(s.warmup_steps >= 0, DMUON_ERR_INVALID_VALUE, c + ": warmup_steps must be >= 0");
  if (s.kind == DMUON_LR_LINEAR || s.kind == DMUON_LR_COSINE || s.kind == DMUON_LR_POLYNOMIAL) {
    require(s.total_steps > s.warmup_steps, DMUON_ERR_INVALID_VALUE,
            c + ": total_steps (" + std::to_string(s.total_steps) + ") must exceed warmup_steps (" +
                std::to_string(s.warmup_steps) + ")");
    require(finite_nonneg(s.final_lr), DMUON_ERR_INVALID_VALUE, c + ": final_lr must be finite and >= 0");
  }
  if (s.kind == DMUON_LR_POLYNOMIAL)
    require(std::isfinite(s.power) && s.power > 0, DMUON_ERR_INVALID_VALUE, c + ": power must be finite and > 0");
  if (s.kind == DMUON_LR_STEP) {
    require(s.step_size >= 1, DMUON_ERR_INVALID_VALUE, c + ": step_size must be >= 1");
    require(finite_nonneg(s.gamma) && s.gamma > 0, DMUON_ERR_INVALID_VALUE, c + ": gamma must be finite and > 0");
  }
}

double scheduled_lr(const dmuon_lr_schedule_t& s, int64_t t) {
  const double base = s.base_lr;
  if (t < s.warmup_steps) return base * static_cast<double>(t + 1) / static_cast<double>(s.warmup_steps);
  const int64_t after = t - s.warmup_steps;
  if (s.kind == DMUON_LR_CONSTANT) return base;
  if (s.kind == DMUON_LR_STEP) return base * std::pow(s.gamma, static_cast<double>(after / s.step_size));
  const double d = static_cast<double>(s.total_steps - s.warmup_steps);
  const double progress = std::min(static_cast<double>(after), d) / d;  // 0 .. 1
  double shape = 1.0 - progress;                                         // linear: 1 .. 0
  if (s.kind == DMUON_LR_COSINE) shape = 0.5 * (1.0 + std::cos(M_PI * progress));
  if (s.kind == DMUON_LR_POLYNOMIAL) shape = std::pow(1.0 - progress, s.power);
  return s.final_lr + (base - s.final_lr) * shape;
}

}  // namespace dmuon
