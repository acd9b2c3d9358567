// Plain float64 reference optimizers and deterministic test data. The library
// is compared against these, never against numbers written into a test.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dmuon/dmuon.h"

namespace ref {

// Deterministic pseudo-random value in [-1, 1) from (seed, a, b, c).
double noise(uint64_t seed, uint64_t a, uint64_t b, uint64_t c = 0);

// Round-trip through the storage dtype (fp32 or bf16).
double round_to(int dtype, double x);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

// Read/write n elements of a flat dtype buffer as doubles.
std::vector<double> load(const void* p, int dtype, int64_t n);
void store(void* p, int dtype, const std::vector<double>& v);

// torch.optim.AdamW, one parameter, float64: decay, moments, bias-corrected update.
struct AdamState {
  std::vector<double> m, v;
  int64_t step = 0;
};
void adamw_step(std::vector<double>& p, const std::vector<double>& g, AdamState& s, double lr, double beta1,
                double beta2, double eps, double weight_decay);

// torch.optim.Muon, one matrix (rows x cols, row-major), float64.
struct MuonState {
  std::vector<double> momentum;
};
// Coefficients (a, b, c) of each Newton-Schulz iteration of a dmuon_ns_schedule_t.
struct NsAbc {
  double a, b, c;
};
std::vector<NsAbc> ns_schedule(int schedule, int steps);
// Orthogonalises x (rows x cols) in place: transposed when tall, divided by
// max(||x||_F * (1.01 for Polar Express, else 1), eps), then `steps` iterations.
void newton_schulz(std::vector<double>& x, int64_t rows, int64_t cols, int steps, int schedule, double eps);
// One Muon step on g (already averaged and clipped) with the Muon fields of o:
// momentum (nesterov or not), NS, shape scale, decoupled decay with lr * lr_mul.
void muon_step(std::vector<double>& p, const std::vector<double>& g, MuonState& s, int64_t rows, int64_t cols,
               const dmuon_options_t& o, double lr_mul = 1.0, double wd_mul = 1.0);

}  // namespace ref
