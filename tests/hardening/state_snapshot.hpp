// Every byte of one rank's optimizer state (parameters, gradients, Adam
// moments and step counts, Muon momentum, the step statistics), read through
// the library's internals so that "nothing changed" and "bitwise identical"
// can be asserted over all of it, not only the parameters.
#pragma once
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/optimizer.hpp"

namespace hardening {

struct Snapshot {
  std::vector<std::pair<std::string, std::vector<unsigned char>>> parts;
};

inline void add_part(Snapshot& s, std::string name, const void* p, std::size_t bytes) {
  std::vector<unsigned char> v(bytes);
  if (bytes) std::memcpy(v.data(), p, bytes);
  s.parts.emplace_back(std::move(name), std::move(v));
}

// State of `opt` on this rank (CPU backend: host memory). Gradients are left
// out unless asked for: the step overwrites them with the average by design.
inline Snapshot snapshot(dmuon_optimizer_t opt, bool with_grads = false) {
  const dmuon::Optimizer& o = opt->impl;
  Snapshot s;
  for (int d = 0; d < dmuon::kNumDtypes; ++d) {
    const std::string t = d == 0 ? "fp32" : "bf16";
    const std::size_t es = dmuon::dtype_size(static_cast<dmuon::Dtype>(d));
    const dmuon::AdamBuffers& a = o.adam_buffers(static_cast<dmuon::Dtype>(d));
    const dmuon::MuonBuffers& m = o.muon_buffers(static_cast<dmuon::Dtype>(d));
    const std::size_t na = static_cast<std::size_t>(a.elements);
    const std::size_t seg = static_cast<std::size_t>(m.segment_elements);
    const std::size_t nm = seg * static_cast<std::size_t>(o.context()->size);
    add_part(s, "adam param " + t, a.param, na * es);
    add_part(s, "adam exp_avg " + t, a.exp_avg, na * 4);
    add_part(s, "adam exp_avg_sq " + t, a.exp_avg_sq, na * 4);
    add_part(s, "muon param " + t, m.param, nm * es);
    add_part(s, "muon momentum " + t, m.momentum, seg * 4);
    if (with_grads) {
      add_part(s, "adam grad " + t, a.grad, na * es);
      add_part(s, "muon grad " + t, m.grad, nm * es);
    }
  }
  add_part(s, "adam step counts", o.adam_steps(),
           sizeof(int64_t) * static_cast<std::size_t>(o.layout().num_adam_rows));
  const int64_t steps = o.step_count();
  add_part(s, "steps taken", &steps, sizeof steps);
  return s;
}

// Name of the first part that differs, "" when every byte is equal.
inline std::string first_difference(const Snapshot& a, const Snapshot& b) {
  if (a.parts.size() != b.parts.size()) return "number of parts";
  for (std::size_t i = 0; i < a.parts.size(); ++i)
    if (a.parts[i] != b.parts[i]) return a.parts[i].first;
  return "";
}

}  // namespace hardening
