// Muon on the CPU backend, for the matrices this rank owns: momentum in fp32,
// Newton-Schulz (plain or Gram, per shape) through BLAS batched over same-shape matrices, decoupled weight
// decay and the update, as torch.optim.Muon does it:
//     g   = grad * clip_coef
//     buf = m buf + (1 - m) g
//     u   = nesterov ? (1 - m) g + m buf : buf
//     O   = NS(u)                 (on u^T when rows > cols, so k = min(rows, cols))
//     p   = p * decay - lr * O    (decay and lr prepared by the optimizer)
// bf16 parameters keep fp32 momentum, run NS in fp32 and round once on store;
// with master weights the update is applied to the fp32 master instead.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/cpu_newton_schulz.hpp"
#include "core/newton_schulz.hpp"

namespace dmuon {

namespace {

// Matrices of one shape are orthogonalised together in chunks whose workspace
// stays under this many floats (256 MiB), so a model of many large matrices
// does not double its memory; a single larger matrix still gets its own chunk.
constexpr std::size_t kWorkspaceBudgetFloats = std::size_t{64} << 20;

// Transposes of a rows x cols block go in tiles so both sides stay in cache.
constexpr int64_t kTile = 32;

// Momentum of one matrix, and the Newton-Schulz input written into x (k x n,
// transposed when the matrix is tall).
template <class T>
void momentum_into(const MuonBuffers& b, const MuonMatrix& mat, int64_t rows, int64_t cols, const MuonHyper& h,
                   float clip, float* __restrict x) {
  const T* __restrict g = static_cast<const T*>(b.grad) + mat.offset;
  float* __restrict buf = b.momentum + mat.momentum_offset;
  const float m = h.momentum, one_m = 1.0f - h.momentum;
  const bool nesterov = h.nesterov != 0;
  auto update = [&](int64_t e) {
    const float gi = load_f32(g, e) * clip;
    const float bi = m * buf[e] + one_m * gi;
    buf[e] = bi;
    return nesterov ? one_m * gi + m * bi : bi;
  };
  if (rows <= cols) {
    for (int64_t e = 0; e < rows * cols; ++e) x[e] = update(e);
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) x[c * rows + r] = update(r * cols + c);
}

// One element of p = p * decay - lr * o. With master weights (bf16 only) the
// master is updated and the parameter is its rounding.
struct ElementUpdate {
  float decay, lr;
  float* master;  // this matrix's masters, or null
  template <class T>
  void operator()(T* p, int64_t e, float o) const {
    if constexpr (std::is_same_v<T, uint16_t>)
      if (master) {
        const float w = master_or_param(master[e], p[e]) * decay - lr * o;
        master[e] = w;
        p[e] = float_to_bf16(w);
        return;
      }
    store_f32(p, e, load_f32(p, e) * decay - lr * o);
  }
};

// p = p * decay - lr * O, reading O from x (transposed back when tall).
template <class T>
void apply_update(const MuonBuffers& b, const MuonMatrix& mat, int64_t rows, int64_t cols,
                  const float* __restrict x) {
  T* __restrict p = static_cast<T*>(b.param) + mat.offset;
  const ElementUpdate update{mat.decay, mat.lr, b.master ? b.master + mat.momentum_offset : nullptr};
  if (rows <= cols) {
    for (int64_t e = 0; e < rows * cols; ++e) update(p, e, x[e]);
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) update(p, r * cols + c, x[c * rows + r]);
}

}  // namespace

void CpuBackend::muon_update(const MuonBuffers (&buffers)[kNumDtypes], const std::vector<MuonShapeBatch>& batches,
                             const MuonHyper& hyper, const StepStats* stats) {
  if (stats->skip) return;  // the non-finite guard: nothing changes, momentum included
  const float clip = static_cast<float>(stats->clip_coef);
  const std::vector<NsCoefficients> coeffs = ns_coefficients(hyper.ns_schedule, hyper.ns_steps);
  const double norm_factor = ns_norm_factor(hyper.ns_schedule);

  std::vector<const MuonMatrix*> active;
  for (const MuonShapeBatch& batch : batches) {
    active.clear();
    for (const MuonMatrix& m : batch.matrices)
      if (m.active) active.push_back(&m);
    if (active.empty()) continue;
    const int64_t rows = batch.rows, cols = batch.cols;
    const long k = static_cast<long>(std::min(rows, cols)), n = static_cast<long>(std::max(rows, cols));
    const MuonBuffers& buf = buffers[static_cast<int>(batch.dtype)];
    const bool bf16 = batch.dtype == Dtype::bf16;

    const std::size_t per_matrix = cpu_ns_workspace_floats(1, k, n);
    const std::size_t chunk = std::max<std::size_t>(1, std::min(active.size(), kWorkspaceBudgetFloats / per_matrix));
    for (std::size_t first = 0; first < active.size(); first += chunk) {
      const int count = static_cast<int>(std::min(chunk, active.size() - first));
      muon_workspace_.resize(std::max(muon_workspace_.size(), cpu_ns_workspace_floats(count, k, n)));
      float* x = muon_workspace_.data();
      for (int i = 0; i < count; ++i) {
        const MuonMatrix& m = *active[first + static_cast<std::size_t>(i)];
        if (bf16)
          momentum_into<uint16_t>(buf, m, rows, cols, hyper, clip, x + i * k * n);
        else
          momentum_into<float>(buf, m, rows, cols, hyper, clip, x + i * k * n);
      }
      const float* out = cpu_newton_schulz(x, count, k, n, coeffs, norm_factor, hyper.ns_eps, kCpuSymmetricProduct,
                                           cpu_ns_iteration(k, n));
      for (int i = 0; i < count; ++i) {
        const MuonMatrix& m = *active[first + static_cast<std::size_t>(i)];
        if (bf16)
          apply_update<uint16_t>(buf, m, rows, cols, out + i * k * n);
        else
          apply_update<float>(buf, m, rows, cols, out + i * k * n);
      }
    }
  }
}

}  // namespace dmuon
