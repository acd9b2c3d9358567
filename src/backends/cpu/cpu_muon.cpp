// Muon on the CPU backend (momentum, Newton-Schulz through BLAS, update).
#include "backends/cpu/cpu_backend.hpp"
#include "core/error.hpp"

namespace dmuon {

void CpuBackend::muon_update(const MuonBuffers (&)[kNumDtypes], const std::vector<MuonShapeBatch>&,
                             const MuonHyper&, const StepStats*) {
  fail(DMUON_ERR_NOT_SUPPORTED, "Muon on the CPU backend is not implemented yet");
}

}  // namespace dmuon
