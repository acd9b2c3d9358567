// What the program said about this step's gradients, per parameter: none
// (dmuon_mark_no_grad, for one step) or in a buffer of its own
// (dmuon_set_external_grad, until changed). Kept apart from the registry,
// compact, and counted, so that a step without marks (the usual case) spends
// nothing per parameter on them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dmuon {

class GradMarks {
 public:
  void mark_no_grad(std::size_t id);
  // grad null: the gradient is in the flat buffer again.
  void set_external(std::size_t id, const void* grad);
  bool has_grad(std::size_t id) const { return id >= no_grad_.size() || !no_grad_[id]; }
  const void* external(std::size_t id) const { return id < external_.size() ? external_[id] : nullptr; }
  bool any() const { return no_grad_count_ + external_count_ > 0; }
  // FNV-1a over every mark (id, no gradient, external address); 0 without any.
  uint64_t hash() const;
  // The end of a step: marks of no gradient lasted one step.
  void step_done();

 private:
  std::vector<uint8_t> no_grad_;
  std::vector<const void*> external_;
  std::size_t no_grad_count_ = 0;
  std::size_t external_count_ = 0;
};

}  // namespace dmuon
