#include "core/grad_marks.hpp"

#include <algorithm>

namespace dmuon {

void GradMarks::mark_no_grad(std::size_t id) {
  if (id >= no_grad_.size()) no_grad_.resize(id + 1, 0);
  if (!no_grad_[id]) ++no_grad_count_;
  no_grad_[id] = 1;
}

void GradMarks::set_external(std::size_t id, const void* grad) {
  if (id >= external_.size()) {
    if (!grad) return;
    external_.resize(id + 1, nullptr);
  }
  external_count_ += (grad != nullptr) - (external_[id] != nullptr);
  external_[id] = grad;
}

uint64_t GradMarks::hash() const {
  if (!any()) return 0;
  uint64_t h = 1469598103934665603ull;
  const std::size_t n = std::max(no_grad_.size(), external_.size());
  for (std::size_t id = 0; id < n; ++id) {
    const bool none = !has_grad(id);
    const void* ext = external(id);
    if (!none && !ext) continue;
    for (uint64_t w : {uint64_t(id), uint64_t(none), uint64_t(reinterpret_cast<uintptr_t>(ext))})
      h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

void GradMarks::step_done() {
  if (!no_grad_count_) return;
  std::fill(no_grad_.begin(), no_grad_.end(), 0);
  no_grad_count_ = 0;
}

}  // namespace dmuon
