#include "core/registry.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "core/sizes.hpp"

namespace dmuon {

uint64_t fnv1a(const void* data, std::size_t len, uint64_t h) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < len; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t param_signature(const ParamRecord& p) {
  uint64_t h = fnv1a(p.name.data(), p.name.size());
  const int32_t head[3] = {static_cast<int32_t>(p.kind), static_cast<int32_t>(p.dtype),
                           static_cast<int32_t>(p.shape.size())};
  h = fnv1a(head, sizeof head, h);
  return fnv1a(p.shape.data(), p.shape.size() * sizeof(int64_t), h);
}

std::string ParamRecord::describe() const {
  std::ostringstream s;
  s << "'" << name << "' (" << kind_name(kind) << ", " << dtype_name(dtype) << ", [";
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? " x " : "") << shape[i];
  s << "])";
  return s.str();
}

int Registry::add(const char* name, int kind, int dtype, int ndim, const int64_t* shape,
                  double lr_mul, double wd_mul) {
  require(name != nullptr, DMUON_ERR_NULL_POINTER, "dmuon_register: name is NULL");
  const std::string n(name);
  require(!n.empty() && n.size() <= kMaxNameLength, DMUON_ERR_INVALID_VALUE,
          "dmuon_register: name must have 1 to 255 bytes");
  require(kind == DMUON_KIND_MUON || kind == DMUON_KIND_ADAM, DMUON_ERR_INVALID_KIND,
          "dmuon_register('" + n + "'): kind " + std::to_string(kind) + " is neither DMUON_KIND_MUON nor DMUON_KIND_ADAM");
  require(dtype == DMUON_DTYPE_FP32 || dtype == DMUON_DTYPE_BF16, DMUON_ERR_INVALID_DTYPE,
          "dmuon_register('" + n + "'): dtype " + std::to_string(dtype) + " is out of range");
  require(ndim >= 1 && ndim <= kMaxDims, DMUON_ERR_INVALID_SHAPE,
          "dmuon_register('" + n + "'): ndim " + std::to_string(ndim) + " must be 1..8");
  require(shape != nullptr, DMUON_ERR_NULL_POINTER, "dmuon_register('" + n + "'): shape is NULL");
  int64_t numel = 1;
  for (int i = 0; i < ndim; ++i) {
    require(shape[i] > 0, DMUON_ERR_INVALID_SHAPE,
            "dmuon_register('" + n + "'): extent " + std::to_string(i) + " is " +
                std::to_string(shape[i]) + ", must be positive");
    numel = checked_mul(numel, shape[i], DMUON_ERR_INVALID_SHAPE,
                        "dmuon_register('" + n + "'): the element count exceeds " + std::to_string(kMaxElements) +
                            " (its optimizer state in bytes would not fit a 64-bit size)");
  }
  require(kind != DMUON_KIND_MUON || ndim == 2, DMUON_ERR_MUON_NOT_2D,
          "dmuon_register('" + n + "'): a Muon parameter must be 2-D, got ndim " + std::to_string(ndim));
  require(std::isfinite(lr_mul) && lr_mul >= 0 && std::isfinite(wd_mul) && wd_mul >= 0,
          DMUON_ERR_INVALID_VALUE, "dmuon_register('" + n + "'): lr_mul and wd_mul must be finite and >= 0");
  require(find(n) < 0, DMUON_ERR_DUPLICATE_NAME, "dmuon_register: '" + n + "' is already registered");

  ParamRecord p;
  p.name = n;
  p.kind = static_cast<Kind>(kind);
  p.dtype = static_cast<Dtype>(dtype);
  p.shape.assign(shape, shape + ndim);
  p.numel = numel;
  p.lr_mul = lr_mul;
  p.wd_mul = wd_mul;
  params_.push_back(std::move(p));
  return static_cast<int>(params_.size() - 1);
}

int Registry::find(const std::string& name) const {
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return static_cast<int>(i);
  return -1;
}

uint64_t Registry::model_hash() const {
  uint64_t h = fnv1a("dmuon-model", 11);
  for (const auto& p : params_) {
    const uint64_t s = param_signature(p);
    h = fnv1a(&s, sizeof s, h);
  }
  return h;
}

namespace {
void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) fail(DMUON_ERR_MPI, std::string("MPI failed in ") + what);
}
}  // namespace

void Registry::check_identical_across(MPI_Comm comm) const {
  // Per-position signatures, padded to the longest list with a sentinel, are
  // compared by a MIN and a MAX all-reduce: the first position where they
  // differ is the first parameter some ranks disagree on. Every rank takes the
  // same branch, so nobody hangs.
  long long count = static_cast<long long>(params_.size()), min_count = 0, max_count = 0;
  check_mpi(MPI_Allreduce(&count, &min_count, 1, MPI_LONG_LONG, MPI_MIN, comm), "registration check");
  check_mpi(MPI_Allreduce(&count, &max_count, 1, MPI_LONG_LONG, MPI_MAX, comm), "registration check");
  std::vector<unsigned long long> sig(static_cast<std::size_t>(max_count), 0ull), lo(sig.size()), hi(sig.size());
  for (std::size_t i = 0; i < params_.size(); ++i) sig[i] = param_signature(params_[i]) | 1ull;
  if (max_count > 0) {
    check_mpi(MPI_Allreduce(sig.data(), lo.data(), static_cast<int>(max_count), MPI_UNSIGNED_LONG_LONG,
                            MPI_MIN, comm), "registration check");
    check_mpi(MPI_Allreduce(sig.data(), hi.data(), static_cast<int>(max_count), MPI_UNSIGNED_LONG_LONG,
                            MPI_MAX, comm), "registration check");
  }
  long long first = -1;
  for (long long i = 0; i < max_count; ++i)
    if (lo[i] != hi[i]) { first = i; break; }
  if (first < 0) return;

  // Name the parameter as rank 0 registered it beside the lowest rank that
  // registered something else there, so every rank gets the same message.
  auto describe_at = [&](long long i) {
    return i < count ? params_[static_cast<std::size_t>(i)].describe() : std::string("<nothing>");
  };
  auto bcast_string = [&](std::string text, int root) {
    int len = static_cast<int>(text.size());
    check_mpi(MPI_Bcast(&len, 1, MPI_INT, root, comm), "registration check");
    text.resize(static_cast<std::size_t>(len));
    check_mpi(MPI_Bcast(&text[0], len, MPI_CHAR, root, comm), "registration check");
    return text;
  };
  unsigned long long root_sig = sig[static_cast<std::size_t>(first)];
  check_mpi(MPI_Bcast(&root_sig, 1, MPI_UNSIGNED_LONG_LONG, 0, comm), "registration check");
  int rank = 0, world = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  const int mine = sig[static_cast<std::size_t>(first)] != root_sig ? rank : world;
  int differing = world;
  check_mpi(MPI_Allreduce(&mine, &differing, 1, MPI_INT, MPI_MIN, comm), "registration check");
  const std::string root = bcast_string(describe_at(first), 0);
  const std::string other = bcast_string(describe_at(first), differing);
  std::ostringstream msg;
  msg << "registration differs across ranks at parameter #" << first << ": rank 0 registered " << root
      << ", rank " << differing << " registered " << other << " (" << min_count << " to " << max_count
      << " parameters per rank)";
  fail(DMUON_ERR_REGISTRATION_MISMATCH, msg.str());
}

}  // namespace dmuon
