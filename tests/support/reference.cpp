#include "support/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ref {

double noise(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (a + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
  x ^= (b + 0x85EBCA77C2B2AE63ull) * 0x94D049BB133111EBull;
  x ^= (c + 0x27D4EB2F165667C5ull) * 0xD6E8FEB86659FD93ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 52) - 1.0;
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

double round_to(int dtype, double x) {
  const float f = static_cast<float>(x);
  return dtype == DMUON_DTYPE_FP32 ? f : bf16_to_float(float_to_bf16(f));
}

std::vector<double> load(const void* p, int dtype, int64_t n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = dtype == DMUON_DTYPE_FP32 ? static_cast<const float*>(p)[i]
                                     : bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  return v;
}

void store(void* p, int dtype, const std::vector<double>& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DMUON_DTYPE_FP32)
      static_cast<float*>(p)[i] = static_cast<float>(v[i]);
    else
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v[i]));
  }
}

void adamw_step(std::vector<double>& p, const std::vector<double>& g, AdamState& s, double lr, double beta1,
                double beta2, double eps, double weight_decay) {
  if (s.m.empty()) {
    s.m.assign(p.size(), 0.0);
    s.v.assign(p.size(), 0.0);
  }
  s.step += 1;
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(s.step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1.0 - lr * weight_decay;
    s.m[i] = beta1 * s.m[i] + (1.0 - beta1) * g[i];
    s.v[i] = beta2 * s.v[i] + (1.0 - beta2) * g[i] * g[i];
    p[i] -= lr / bc1 * s.m[i] / (std::sqrt(s.v[i]) / std::sqrt(bc2) + eps);
  }
}

namespace {

// Row-major C (m x p) = A (m x q) B (q x p), plain triple loop.
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t q,
                           int64_t p) {
  std::vector<double> c(static_cast<std::size_t>(m * p), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < q; ++l) {
      const double ail = a[i * q + l];
      for (int64_t j = 0; j < p; ++j) c[i * p + j] += ail * b[l * p + j];
    }
  return c;
}

std::vector<double> transpose(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}

}  // namespace

// The coefficient schedules, written here from their sources rather than taken
// from the library, so that a wrong table in the library shows up as a test
// failure: Muon's quintic (Keller Jordan), and Polar Express (arXiv:2505.16932,
// the authors' reference code) with its safety factor 1.01 on all but the last.
std::vector<NsAbc> ns_schedule(int schedule, int steps) {
  std::vector<NsAbc> out;
  if (schedule == DMUON_NS_QUINTIC) {
    out.assign(static_cast<std::size_t>(steps), NsAbc{3.4445, -4.7750, 2.0315});
    return out;
  }
  const NsAbc pe[] = {{8.28721201814563, -23.595886519098837, 17.300387312530933},
                      {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
                      {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
                      {3.3184196573706015, -2.488488024314874, 0.51004894012372},
                      {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
                      {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
                      {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
                      {1.875, -1.25, 0.375}};
  const int n = 8;
  for (int i = 0; i < steps; ++i) {
    NsAbc c = pe[std::min(i, n - 1)];
    if (i < n - 1) c = NsAbc{c.a / 1.01, c.b / std::pow(1.01, 3), c.c / std::pow(1.01, 5)};
    out.push_back(c);
  }
  return out;
}

void newton_schulz(std::vector<double>& x, int64_t rows, int64_t cols, int steps, int schedule, double eps) {
  const bool tall = rows > cols;
  std::vector<double> X = tall ? transpose(x, rows, cols) : x;
  const int64_t k = std::min(rows, cols), n = std::max(rows, cols);
  double sumsq = 0.0;
  for (double v : X) sumsq += v * v;
  const double factor = schedule == DMUON_NS_POLAR_EXPRESS ? 1.01 : 1.0;
  const double denom = std::max(factor * std::sqrt(sumsq), eps);  // torch: norm().clamp(min=eps)
  for (double& v : X) v /= denom;
  for (const NsAbc& c : ns_schedule(schedule, steps)) {
    const std::vector<double> A = matmul(X, transpose(X, k, n), k, n, k);  // X X^T
    const std::vector<double> AA = matmul(A, A, k, k, k);
    std::vector<double> B(A.size());
    for (std::size_t i = 0; i < B.size(); ++i) B[i] = c.b * A[i] + c.c * AA[i];
    const std::vector<double> BX = matmul(B, X, k, k, n);
    for (std::size_t i = 0; i < X.size(); ++i) X[i] = c.a * X[i] + BX[i];
  }
  x = tall ? transpose(X, k, n) : X;
}

void muon_step(std::vector<double>& p, const std::vector<double>& g, MuonState& s, int64_t rows, int64_t cols,
               const dmuon_options_t& o, double lr_mul, double wd_mul) {
  if (s.momentum.empty()) s.momentum.assign(p.size(), 0.0);
  const double m = o.muon_momentum;
  std::vector<double> u(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    s.momentum[i] = m * s.momentum[i] + (1.0 - m) * g[i];
    u[i] = o.muon_nesterov ? (1.0 - m) * g[i] + m * s.momentum[i] : s.momentum[i];
  }
  newton_schulz(u, rows, cols, o.muon_ns_steps, o.muon_ns_schedule, o.muon_ns_eps);
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  const double scale = o.muon_scale == DMUON_SCALE_MATCH_ADAMW_RMS ? 0.2 * std::sqrt(std::max(r, c))
                                                                   : std::sqrt(std::max(1.0, r / c));
  const double lr = o.muon_lr * lr_mul;
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = p[i] * (1.0 - lr * o.muon_weight_decay * wd_mul) - lr * scale * u[i];
}

}  // namespace ref
