#include "core/newton_schulz.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace dmuon {

namespace {
// Polar Express (Amsel, Persson, Musco, Gower, 2025, arXiv:2505.16932): the
// per-iteration degree-5 coefficients of the authors' reference code
// (github.com/NoahAmsel/PolarExpress, polar_express/basic.py: l = 1e-3,
// cushion 0.02), checked digit for digit on 2026-12-02. Iterations past the
// list repeat the last one. Every polynomial but the last is divided by the
// safety factor 1.01^(1,3,5), as in that code; that is done here in double and
// rounded to float once, so the table keeps the published digits.
struct PolarExpressRow {
  double a, b, c;
};
const PolarExpressRow kPolarExpress[] = {
    {8.28721201814563, -23.595886519098837, 17.300387312530933},
    {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
    {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
    {3.3184196573706015, -2.488488024314874, 0.51004894012372},
    {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
    {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
    {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
    {1.875, -1.25, 0.375},
};
constexpr double kPolarExpressSafety = 1.01;
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
    const PolarExpressRow& r = kPolarExpress[std::min(i, n - 1)];
    const double s = i < n - 1 ? kPolarExpressSafety : 1.0;
    out.push_back(NsCoefficients{static_cast<float>(r.a / s), static_cast<float>(r.b / (s * s * s)),
                                 static_cast<float>(r.c / (s * s * s * s * s))});
  }
  return out;
}

// Polar Express divides by 1.01 * ||X||_F so that rounding cannot push the top
// singular value past 1, the edge of the interval its polynomials are fit on.
double ns_norm_factor(int schedule) { return schedule == DMUON_NS_POLAR_EXPRESS ? kPolarExpressSafety : 1.0; }

}  // namespace dmuon
