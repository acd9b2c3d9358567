// The registered parameters, in registration order, and the collective check
// that every rank registered the same list.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/dtype.hpp"

namespace dmuon {

constexpr int kMaxDims = 8;
constexpr std::size_t kMaxNameLength = 255;

struct ParamRecord {
  std::string name;
  Kind kind;
  Dtype dtype;
  std::vector<int64_t> shape;
  int64_t numel;
  double lr_mul;
  double wd_mul;
  // Placement, set by finalize (plan.cpp):
  int owner = -1;        // Muon: owning rank; Adam: -1 (replicated)
  int64_t offset = 0;    // element offset in its (kind, dtype) flat buffer
  int adam_row = -1;     // Adam: row in the scalar table (and step-count slot)

  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
  std::string describe() const;  // "name (kind, dtype, [a x b])"
};

class Registry {
 public:
  // Validates everything first: on error nothing is added.
  int add(const char* name, int kind, int dtype, int ndim, const int64_t* shape, double lr_mul,
          double wd_mul);
  // Collective: throws DMUON_ERR_REGISTRATION_MISMATCH on every rank when any
  // two ranks differ, naming the first differing parameter.
  void check_identical_across(MPI_Comm comm) const;
  int find(const std::string& name) const;  // -1 when absent
  std::size_t size() const { return params_.size(); }
  ParamRecord& operator[](std::size_t i) { return params_[i]; }
  const ParamRecord& operator[](std::size_t i) const { return params_[i]; }
  std::vector<ParamRecord>& all() { return params_; }
  const std::vector<ParamRecord>& all() const { return params_; }
  // Hash of the whole list (names, kinds, dtypes, shapes, order).
  uint64_t model_hash() const;

 private:
  std::vector<ParamRecord> params_;
};

uint64_t fnv1a(const void* data, std::size_t len, uint64_t h = 1469598103934665603ull);
uint64_t param_signature(const ParamRecord& p);

}  // namespace dmuon
