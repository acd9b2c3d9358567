// One parameter of a model as dmuon_register() takes it. The gpu tests
// (gpu/gpu_model.hpp) and the CUDA benchmarks (bench/cuda/bench_common.cuh)
// both build their models from lists of these; it lives here, header-only and
// with nothing but the public API, so that the benchmarks can use it without
// depending on the test support library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dmuon/dmuon.h"

namespace dmuon_test {

struct ParamSpec {
  std::string name;
  int kind;
  int dtype;
  std::vector<int64_t> shape;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    return n;
  }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * (dtype == DMUON_DTYPE_FP32 ? 4 : 2); }
};

}  // namespace dmuon_test
