// Reaching into a gpu test's Model for the "cuda" backend behind its context,
// for tests that check the backend's own diagnostics and kernel choices.
#pragma once
#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.hpp"
#include "core/context.hpp"
#include "core/optimizer.hpp"
#include "gpu/gpu_model.hpp"

namespace gputest {

inline dmuon::CudaBackend& cuda_of(Model& m) {
  auto* b = dynamic_cast<dmuon::CudaBackend*>(reinterpret_cast<dmuon_context_s*>(m.ctx)->backend.get());
  EXPECT_NE(b, nullptr);
  return *b;
}
// The optimizer's step state, whose diagnostics the backend reports.
inline const dmuon::StepState* key_of(Model& m) { return m.opt->impl.step_state(); }

}  // namespace gputest
