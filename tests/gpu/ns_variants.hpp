// Newton-Schulz variants (symmetric row-block products, Gram iteration)
// against the plain products: the same model stepped twice from one start.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu/gpu_model.hpp"

namespace gputest {

// Steps `plain` and `variant` three times, and checks each Muon matrix's
// update of each step against the plain one, each from its own previous
// parameters (they drift apart by rounding): within `tolerance` of the
// update's norm, plus half a bf16 ulp of storage per element, and bit for
// bit for shapes[exact], which the variant's products do not fit.
inline void expect_updates_match(Model& plain, Model& variant, const std::vector<Spec>& shapes, std::size_t exact,
                                 double tolerance, const std::string& label) {
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<double>> bp, bv;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      bp.push_back(plain.get(int(k)));
      bv.push_back(variant.get(int(k)));
    }
    plain.grads(step);
    variant.grads(step);
    ASSERT_EQ(dmuon_step(plain.opt), DMUON_SUCCESS) << dmuon_context_last_error(plain.ctx);
    ASSERT_EQ(dmuon_step(variant.opt), DMUON_SUCCESS) << dmuon_context_last_error(variant.ctx);
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const Spec& s = shapes[k];
      if (s.kind != DMUON_KIND_MUON) continue;
      if (k == exact) {
        ASSERT_EQ(variant.raw(int(k)), plain.raw(int(k))) << s.name << " step " << step;
        continue;
      }
      const auto ap = plain.get(int(k)), av = variant.get(int(k));
      double num = 0, den = 0, quant = 0;
      for (std::size_t i = 0; i < ap.size(); ++i) {
        const double up = ap[i] - bp[k][i], uv = av[i] - bv[k][i];
        num += (uv - up) * (uv - up);
        den += up * up;
        quant += s.dtype == DMUON_DTYPE_BF16 ? (ap[i] / 256) * (ap[i] / 256) : 0.0;  // half an ulp of storage
      }
      ASSERT_GT(den, 0.0) << s.name;
      EXPECT_LT(std::sqrt(num), std::sqrt(tolerance * tolerance * den + quant))
          << s.name << " step " << step << " " << label << ": relative difference " << std::sqrt(num / den);
      if (step == 0) std::printf("%s %s: against plain %.3g\n", s.name.c_str(), label.c_str(), std::sqrt(num / den));
    }
  }
}

}  // namespace gputest
