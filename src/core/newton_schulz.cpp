#include "core/newton_schulz.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace dmuon {

namespace {
// Polar Express (Amsel, Persson, Musco, Gower, 2025, arXiv:2505.16932), the
// per-iteration degree-5 coefficients of their reference code; iterations past
// the list repeat the last one. The first ones are divided by the safety
// factor 1.01^(1,3,5) as in that code.
const NsCoefficients kPolarExpress[] = {
    {8.28721201814563f, -23.595886519098837f, 17.300387312530933f},
    {4.107059111542203f, -2.9478499167379106f, 0.5448431082926601f},
    {3.9486908534822946f, -2.908902115962949f, 0.5518191394370137f},
    {3.3184196573706015f, -2.488488024314874f, 0.51004894012372f},
    {2.300652019954817f, -1.6689039845747493f, 0.4188073119525673f},
    {1.891301407787398f, -1.2679958271945868f, 0.37680408948524835f},
    {1.8750014808534479f, -1.2500016453999487f, 0.3750001645474248f},
    {1.875f, -1.25f, 0.375f},
};
}  // namespace

std::vector<NsCoefficients> ns_coefficients(int schedule, int steps) {
  require(steps >= 1 && steps <= 100, DMUON_ERR_INVALID_VALUE, "muon_ns_steps must be 1..100");
  std::vector<NsCoefficients> out;
  if (schedule == DMUON_NS_QUINTIC) {
    out.assign(static_cast<std::size_t>(steps), NsCoefficients{3.4445f, -4.7750f, 2.0315f});
    return out;
  }
  require(schedule == DMUON_NS_POLAR_EXPRESS, DMUON_ERR_INVALID_VALUE, "unknown muon_ns_schedule");
  constexpr int n = static_cast<int>(sizeof kPolarExpress / sizeof kPolarExpress[0]);
  for (int i = 0; i < steps; ++i) {
    NsCoefficients c = kPolarExpress[std::min(i, n - 1)];
    if (i < n - 1) {
      const double s = 1.01;
      c = {static_cast<float>(c.a / s), static_cast<float>(c.b / (s * s * s)),
           static_cast<float>(c.c / (s * s * s * s * s))};
    }
    out.push_back(c);
  }
  return out;
}

double ns_norm_factor(int schedule) { return schedule == DMUON_NS_POLAR_EXPRESS ? 1.01 : 1.0; }

}  // namespace dmuon
