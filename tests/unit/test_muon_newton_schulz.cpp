// The host Newton-Schulz (backends/cpu/cpu_newton_schulz) against the float64
// reference: both schedules, both ways of forming X X^T, a batch of different
// matrices, wide and square shapes (tall ones are transposed by the caller and
// covered by test_muon), and the coefficient tables themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/cpu_newton_schulz.hpp"
#include "core/error.hpp"
#include "core/newton_schulz.hpp"
#include "support/reference.hpp"

using namespace dmuon;

namespace {

TEST(MuonNewtonSchulz, CoefficientTablesMatchTheirSources) {
  for (int schedule : {DMUON_NS_QUINTIC, DMUON_NS_POLAR_EXPRESS}) {
    for (int steps : {1, 5, 7, 8, 12}) {
      const auto got = ns_coefficients(schedule, steps);
      const auto want = ref::ns_schedule(schedule, steps);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        // Equal to float rounding of the published double values.
        EXPECT_EQ(got[i].a, static_cast<float>(want[i].a)) << "schedule " << schedule << " iteration " << i;
        EXPECT_EQ(got[i].b, static_cast<float>(want[i].b)) << "schedule " << schedule << " iteration " << i;
        EXPECT_EQ(got[i].c, static_cast<float>(want[i].c)) << "schedule " << schedule << " iteration " << i;
      }
    }
  }
  EXPECT_EQ(ns_norm_factor(DMUON_NS_QUINTIC), 1.0);
  EXPECT_EQ(ns_norm_factor(DMUON_NS_POLAR_EXPRESS), 1.01);
}

struct Case {
  long k, n;
  int batch;
  int schedule;
  int steps;
  SymmetricProduct product;
  double amplitude = 3.0;  // of the input entries; below eps/sqrt(k n) the eps floor decides the scale
};

class HostNs : public ::testing::TestWithParam<Case> {};

TEST_P(HostNs, MatchesFloat64Reference) {
  const Case c = GetParam();
  std::vector<float> work(cpu_ns_workspace_floats(c.batch, c.k, c.n), -7.0f);  // scratch garbage must not matter
  std::vector<std::vector<double>> want(static_cast<std::size_t>(c.batch));
  for (int b = 0; b < c.batch; ++b) {
    auto& w = want[static_cast<std::size_t>(b)];
    w.resize(static_cast<std::size_t>(c.k * c.n));
    for (long i = 0; i < c.k * c.n; ++i) {
      work[static_cast<std::size_t>(b * c.k * c.n + i)] = static_cast<float>(c.amplitude * ref::noise(5, b, i));
      w[static_cast<std::size_t>(i)] = work[static_cast<std::size_t>(b * c.k * c.n + i)];
    }
    ref::newton_schulz(w, c.k, c.n, c.steps, c.schedule, 1e-7);
  }
  const float* out = cpu_newton_schulz(work.data(), c.batch, c.k, c.n, ns_coefficients(c.schedule, c.steps),
                                       ns_norm_factor(c.schedule), 1e-7f, c.product);
  double worst = 0.0;
  for (int b = 0; b < c.batch; ++b)
    for (long i = 0; i < c.k * c.n; ++i) {
      const double got = out[b * c.k * c.n + i], w = want[static_cast<std::size_t>(b)][static_cast<std::size_t>(i)];
      worst = std::max(worst, std::fabs(got - w));
    }
  // Entries are O(1/sqrt(k)); fp32 rounding amplified by the iteration was
  // measured at about 1e-6, and a coefficient or eps off by 1% moves them by 1e-3.
  EXPECT_LT(worst, 2e-5) << "k " << c.k << " n " << c.n;
  RecordProperty("max_abs_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HostNs,
    ::testing::Values(Case{8, 8, 1, DMUON_NS_QUINTIC, 5, SymmetricProduct::sgemm},
                      Case{16, 40, 3, DMUON_NS_QUINTIC, 5, SymmetricProduct::sgemm},
                      Case{16, 40, 3, DMUON_NS_QUINTIC, 5, SymmetricProduct::ssyrk},
                      Case{1, 9, 2, DMUON_NS_QUINTIC, 5, SymmetricProduct::sgemm},
                      Case{24, 24, 2, DMUON_NS_POLAR_EXPRESS, 8, SymmetricProduct::sgemm},
                      Case{24, 24, 2, DMUON_NS_POLAR_EXPRESS, 10, SymmetricProduct::ssyrk},
                      Case{10, 33, 1, DMUON_NS_POLAR_EXPRESS, 3, SymmetricProduct::sgemm},
                      // Norm below eps: divided by eps (torch's clamp), not by norm + eps.
                      Case{8, 12, 1, DMUON_NS_QUINTIC, 5, SymmetricProduct::sgemm, 1e-9},
                      Case{8, 12, 1, DMUON_NS_POLAR_EXPRESS, 5, SymmetricProduct::sgemm, 1e-9}));

TEST(MuonNewtonSchulz, ZeroMatrixStaysZero) {
  // A zero update is divided by eps, not by its zero norm: no NaN.
  std::vector<float> work(cpu_ns_workspace_floats(1, 4, 6), 0.0f);
  const float* out = cpu_newton_schulz(work.data(), 1, 4, 6, ns_coefficients(DMUON_NS_QUINTIC, 5), 1.0, 1e-7f,
                                       SymmetricProduct::sgemm);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(out[i], 0.0f);
}

TEST(MuonNewtonSchulz, OversizedMatrixIsRefused) {
  float dummy = 0;
  EXPECT_THROW(cpu_newton_schulz(&dummy, 1, 70000, 70000, ns_coefficients(DMUON_NS_QUINTIC, 1), 1.0, 1e-7f,
                                 SymmetricProduct::sgemm),
               Error);
}

}  // namespace
