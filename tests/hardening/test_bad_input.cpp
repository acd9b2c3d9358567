// The bad-input matrix: every public C function of dmuon.h, called with a
// NULL handle, a destroyed handle, a handle of the other type, NULL pointers,
// out-of-range values, and in the wrong order. Each call must return its
// documented status (docs/errors.md), leave a message, and change nothing:
// before and after every call the test takes a fingerprint of every optimizer
// (registration list, options, attributes, every byte of state, gradients
// included) and of the context, and the two must be equal.
// (tests/unit/test_api.cpp keeps the context-creation, options and version
// checks; its registration, call-order and handle-type cases moved here.)
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/api_guard.hpp"
#include "hardening/state_snapshot.hpp"

namespace {

const int64_t kMat[2] = {4, 3}, kVec[1] = {5};
const double kNaN = std::numeric_limits<double>::quiet_NaN(), kInf = std::numeric_limits<double>::infinity();

std::string fingerprint(dmuon_optimizer_t opt) {
  std::ostringstream s;
  const dmuon::Optimizer& o = opt->impl;
  const dmuon_options_t& op = o.options();
  s.write(reinterpret_cast<const char*>(&op), sizeof op);
  s << "|finalized " << o.finalized();
  for (std::size_t i = 0; i < o.registry().size(); ++i) {
    const dmuon::ParamRecord& p = o.registry()[i];
    s << "|" << p.describe() << " " << p.lr_mul << " " << p.wd_mul << " " << o.grad_marks().has_grad(i) << " "
      << o.grad_marks().external(i) << " owner " << p.owner << " offset " << p.offset;
  }
  for (const auto& kv : o.user_attributes) s << "|user " << kv.first << "=" << kv.second;
  for (const auto& kv : o.restored_attributes) s << "|restored " << kv.first << "=" << kv.second;
  if (o.finalized()) {
    for (const auto& part : hardening::snapshot(opt, true).parts) {
      s << "|" << part.first << ":";
      s.write(reinterpret_cast<const char*>(part.second.data()), static_cast<std::streamsize>(part.second.size()));
    }
    const dmuon_clip_stats_t st = o.clip_stats();  // field by field: the struct has padding
    s << "|stats " << st.total_norm << " " << st.clip_coef << " " << st.clipped << " " << st.found_inf << " "
      << st.step_skipped;
  }
  return s.str();
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_optimizer_create(ctx, nullptr, &empty), DMUON_SUCCESS);  // nothing registered
    ASSERT_EQ(dmuon_optimizer_create(ctx, nullptr, &open), DMUON_SUCCESS);   // registered, not finalized
    ASSERT_EQ(dmuon_optimizer_create(ctx, nullptr, &fin), DMUON_SUCCESS);    // finalized, one step taken
    for (dmuon_optimizer_t o : {open, fin}) {
      ASSERT_EQ(dmuon_register(o, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, kMat, 1, 1, nullptr), DMUON_SUCCESS);
      ASSERT_EQ(dmuon_register(o, "b", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, 1, kVec, 1, 1, nullptr), DMUON_SUCCESS);
    }
    ASSERT_EQ(dmuon_optimizer_finalize(fin), DMUON_SUCCESS);
    void* g = nullptr;
    ASSERT_EQ(dmuon_param_view(fin, 0, nullptr, &g), DMUON_SUCCESS);
    for (int i = 0; i < 12; ++i) static_cast<float*>(g)[i] = 0.1f * static_cast<float>(i - 5);
    ASSERT_EQ(dmuon_step(fin), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_checkpoint_set_attribute(fin, "run", "matrix"), DMUON_SUCCESS);
    // A destroyed optimizer: destroy NULLs the handle it is given.
    ASSERT_EQ(dmuon_optimizer_create(ctx, nullptr, &destroyed), DMUON_SUCCESS);
    ASSERT_EQ(dmuon_optimizer_destroy(&destroyed), DMUON_SUCCESS);
    ASSERT_EQ(destroyed, nullptr);
    dir = std::filesystem::temp_directory_path() / ("dmuon_bad_input_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
  }
  void TearDown() override {
    for (dmuon_optimizer_t* o : {&empty, &open, &fin}) EXPECT_EQ(dmuon_optimizer_destroy(o), DMUON_SUCCESS);
    EXPECT_EQ(dmuon_context_destroy(&ctx), DMUON_SUCCESS);
    std::filesystem::remove_all(dir);
  }

  std::string everything() {
    return fingerprint(empty) + "#" + fingerprint(open) + "#" + fingerprint(fin) + "#flag " +
           std::to_string(ctx->checkpoint_flag) + " handlers " + std::to_string(ctx->saved_handlers.size());
  }

  // One row of the matrix: `call` must return `expected`, leave a message
  // (unless `quiet`: the signal-safe call sets none) and change nothing.
  void expect(const std::string& row, int expected, const std::function<int()>& call, bool quiet = false) {
    const std::string before = everything();
    ctx->last_error.clear();
    dmuon::orphan_last_error().clear();
    const int rc = call();
    EXPECT_EQ(rc, expected) << row << ": got " << dmuon_error_string(rc) << " (" << ctx->last_error
                            << dmuon::orphan_last_error() << ")";
    if (!quiet && rc != DMUON_SUCCESS)
      EXPECT_FALSE(ctx->last_error.empty() && dmuon::orphan_last_error().empty()) << row << ": no message";
    EXPECT_TRUE(everything() == before) << row << ": the call changed the optimizer or the context";
    ++rows;
  }

  // The handle columns: NULL, destroyed, and the other type.
  void expect_bad_optimizer(const std::string& name, const std::function<int(dmuon_optimizer_t)>& call) {
    expect(name + "(NULL)", DMUON_ERR_NULL_HANDLE, [&] { return call(nullptr); });
    expect(name + "(destroyed)", DMUON_ERR_NULL_HANDLE, [&] { return call(destroyed); });
    expect(name + "(context as optimizer)", DMUON_ERR_NULL_HANDLE,
           [&] { return call(reinterpret_cast<dmuon_optimizer_t>(ctx)); });
  }
  void expect_bad_context(const std::string& name, const std::function<int(dmuon_context_t)>& call,
                          bool quiet = false) {
    expect(name + "(NULL)", DMUON_ERR_NULL_HANDLE, [&] { return call(nullptr); }, quiet);
    expect(name + "(optimizer as context)", DMUON_ERR_NULL_HANDLE,
           [&] { return call(reinterpret_cast<dmuon_context_t>(fin)); }, quiet);
  }

  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t empty = nullptr, open = nullptr, fin = nullptr, destroyed = nullptr;
  std::filesystem::path dir;
  int rows = 0;
};

TEST_F(BadInput, VersionAndContextCalls) {
  expect("dmuon_get_version(NULL, NULL, NULL)", DMUON_SUCCESS, [] { return dmuon_get_version(nullptr, nullptr, nullptr); });
  expect("dmuon_check_version(major + 1)", DMUON_ERR_NOT_SUPPORTED,
         [] { return dmuon_check_version(DMUON_VERSION_MAJOR + 1, 0, 0); });
  expect("dmuon_check_version(newer minor)", DMUON_ERR_NOT_SUPPORTED,
         [] { return dmuon_check_version(DMUON_VERSION_MAJOR, DMUON_VERSION_MINOR + 1, 0); });
  EXPECT_STREQ(dmuon_error_string(-1), "unknown status");
  EXPECT_STREQ(dmuon_error_string(DMUON_STATUS_COUNT), "unknown status");

  dmuon_context_t made = nullptr;
  expect("dmuon_context_create(resource NULL)", DMUON_ERR_NULL_POINTER,
         [&] { return dmuon_context_create(MPI_COMM_WORLD, nullptr, &made); });
  expect("dmuon_context_create(ctx NULL)", DMUON_ERR_NULL_POINTER,
         [&] { return dmuon_context_create(MPI_COMM_WORLD, "cpu", nullptr); });
  expect("dmuon_context_create(MPI_COMM_NULL)", DMUON_ERR_INVALID_VALUE,
         [&] { return dmuon_context_create(MPI_COMM_NULL, "cpu", &made); });
  expect("dmuon_context_create(\"\")", DMUON_ERR_UNKNOWN_BACKEND,
         [&] { return dmuon_context_create(MPI_COMM_WORLD, "", &made); });
  expect("dmuon_context_create(\"cpu \")", DMUON_ERR_UNKNOWN_BACKEND,
         [&] { return dmuon_context_create(MPI_COMM_WORLD, "cpu ", &made); });
  expect("dmuon_context_create_f(MPI_COMM_NULL)", DMUON_ERR_INVALID_VALUE,
         [&] { return dmuon_context_create_f(MPI_Comm_c2f(MPI_COMM_NULL), "cpu", &made); });
  expect("dmuon_context_create_f(resource NULL)", DMUON_ERR_NULL_POINTER,
         [&] { return dmuon_context_create_f(MPI_Comm_c2f(MPI_COMM_WORLD), nullptr, &made); });
  EXPECT_EQ(made, nullptr);

  // Destroy: NULL is harmless, the other type is refused and destroys nothing.
  expect("dmuon_context_destroy(NULL)", DMUON_SUCCESS, [] { return dmuon_context_destroy(nullptr); });
  expect("dmuon_context_destroy(&NULL)", DMUON_SUCCESS, [&] { return dmuon_context_destroy(&made); });
  dmuon_context_t wrong = reinterpret_cast<dmuon_context_t>(fin);
  expect("dmuon_context_destroy(optimizer)", DMUON_ERR_NULL_HANDLE, [&] { return dmuon_context_destroy(&wrong); });
  EXPECT_EQ(wrong, reinterpret_cast<dmuon_context_t>(fin));

  char buf[8] = "xxxxxxx";
  expect_bad_context("dmuon_context_backend", [&](dmuon_context_t c) { return dmuon_context_backend(c, buf, sizeof buf); });
  expect("dmuon_context_backend(buf NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_context_backend(ctx, nullptr, 8); });
  expect("dmuon_context_backend(len 0)", DMUON_ERR_INVALID_VALUE, [&] { return dmuon_context_backend(ctx, buf, 0); });
  expect("dmuon_context_backend(len 3 for \"cpu\")", DMUON_ERR_INVALID_VALUE, [&] { return dmuon_context_backend(ctx, buf, 3); });
  EXPECT_STREQ(buf, "xxxxxxx");
  int rank = -7, size = -7;
  expect_bad_context("dmuon_context_rank", [&](dmuon_context_t c) { return dmuon_context_rank(c, &rank, &size); });
  EXPECT_EQ(rank, -7);
  expect("dmuon_context_rank(NULL, NULL)", DMUON_SUCCESS, [&] { return dmuon_context_rank(ctx, nullptr, nullptr); });
  // last_error with a bad handle falls back to the message without a context.
  dmuon::orphan_last_error() = "orphan";
  EXPECT_STREQ(dmuon_context_last_error(nullptr), "orphan");
  EXPECT_STREQ(dmuon_context_last_error(reinterpret_cast<dmuon_context_t>(fin)), "orphan");

  // Signals and checkpoint requests.
  expect_bad_context("dmuon_install_signal_handler", [](dmuon_context_t c) { return dmuon_install_signal_handler(c, SIGUSR1); });
  for (int sig : {0, -1, NSIG, SIGKILL, SIGSTOP})
    expect("dmuon_install_signal_handler(" + std::to_string(sig) + ")", DMUON_ERR_INVALID_VALUE,
           [&] { return dmuon_install_signal_handler(ctx, sig); });
  expect_bad_context("dmuon_request_checkpoint", [](dmuon_context_t c) { return dmuon_request_checkpoint(c); }, true);
  int requested = -7;
  expect_bad_context("dmuon_checkpoint_requested", [&](dmuon_context_t c) { return dmuon_checkpoint_requested(c, &requested); });
  expect("dmuon_checkpoint_requested(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_checkpoint_requested(ctx, nullptr); });
  EXPECT_EQ(requested, -7);
  std::printf("%d rows\n", rows);
}

TEST_F(BadInput, OptimizerCreateAndOptions) {
  dmuon_optimizer_t made = nullptr;
  expect_bad_context("dmuon_optimizer_create", [&](dmuon_context_t c) { return dmuon_optimizer_create(c, nullptr, &made); });
  expect("dmuon_optimizer_create(opt NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_optimizer_create(ctx, nullptr, nullptr); });
  auto with = [&](const std::string& row, int status, const std::function<void(dmuon_options_t&)>& change) {
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    change(o);
    expect("dmuon_optimizer_create(" + row + ")", status, [&] { return dmuon_optimizer_create(ctx, &o, &made); });
  };
  with("magic 0", DMUON_ERR_OPTIONS_VERSION, [](dmuon_options_t& o) { o.magic = 0; });
  with("version 0", DMUON_ERR_OPTIONS_VERSION, [](dmuon_options_t& o) { o.version = 0; });
  with("struct_size 8", DMUON_ERR_OPTIONS_VERSION, [](dmuon_options_t& o) { o.struct_size = 8; });
  // From a newer dmuon.h than the library's: refused, not half read.
  with("version 99", DMUON_ERR_OPTIONS_VERSION, [](dmuon_options_t& o) { o.version = 99; });
  with("version + 1", DMUON_ERR_OPTIONS_VERSION, [](dmuon_options_t& o) { o.version = DMUON_OPTIONS_VERSION + 1; });
  with("struct_size + 8", DMUON_ERR_OPTIONS_VERSION, [](dmuon_options_t& o) { o.struct_size = sizeof o + 8; });
  with("version 1, struct_size of 2", DMUON_ERR_OPTIONS_VERSION, [](dmuon_options_t& o) { o.version = 1; o.struct_size = 8; });
  const int V = DMUON_ERR_INVALID_VALUE;
  with("adam_lr -1", V, [](dmuon_options_t& o) { o.adam_lr = -1; });
  with("adam_lr NaN", V, [](dmuon_options_t& o) { o.adam_lr = kNaN; });
  with("muon_lr inf", V, [](dmuon_options_t& o) { o.muon_lr = kInf; });
  with("adam_beta1 1", V, [](dmuon_options_t& o) { o.adam_beta1 = 1.0; });
  with("adam_beta2 -0.1", V, [](dmuon_options_t& o) { o.adam_beta2 = -0.1; });
  with("adam_beta1 NaN", V, [](dmuon_options_t& o) { o.adam_beta1 = kNaN; });
  with("adam_eps 0", V, [](dmuon_options_t& o) { o.adam_eps = 0; });
  with("adam_weight_decay -1", V, [](dmuon_options_t& o) { o.adam_weight_decay = -1; });
  with("muon_weight_decay NaN", V, [](dmuon_options_t& o) { o.muon_weight_decay = kNaN; });
  with("muon_momentum 1", V, [](dmuon_options_t& o) { o.muon_momentum = 1.0; });
  with("muon_nesterov 2", V, [](dmuon_options_t& o) { o.muon_nesterov = 2; });
  with("muon_ns_steps 0", V, [](dmuon_options_t& o) { o.muon_ns_steps = 0; });
  with("muon_ns_steps 101", V, [](dmuon_options_t& o) { o.muon_ns_steps = 101; });
  with("muon_ns_schedule 2", V, [](dmuon_options_t& o) { o.muon_ns_schedule = 2; });
  with("muon_scale -1", V, [](dmuon_options_t& o) { o.muon_scale = -1; });
  with("muon_ns_eps 0", V, [](dmuon_options_t& o) { o.muon_ns_eps = 0; });
  with("max_grad_norm inf", V, [](dmuon_options_t& o) { o.max_grad_norm = kInf; });
  with("skip_nonfinite 2", V, [](dmuon_options_t& o) { o.skip_nonfinite = 2; });
  with("cuda_graphs -1", V, [](dmuon_options_t& o) { o.cuda_graphs = -1; });
  with("collective_timeout_ms -1", V, [](dmuon_options_t& o) { o.collective_timeout_ms = -1; });
  with("cuda_step_graph 2", V, [](dmuon_options_t& o) { o.cuda_step_graph = 2; });
  with("muon_ns_symmetric 3", V, [](dmuon_options_t& o) { o.muon_ns_symmetric = 3; });
  with("muon_ns_symmetric -2", V, [](dmuon_options_t& o) { o.muon_ns_symmetric = -2; });
  with("restore_gather 2", V, [](dmuon_options_t& o) { o.restore_gather = 2; });
  EXPECT_EQ(made, nullptr);

  expect("dmuon_optimizer_destroy(NULL)", DMUON_SUCCESS, [] { return dmuon_optimizer_destroy(nullptr); });
  expect("dmuon_optimizer_destroy(&NULL)", DMUON_SUCCESS, [&] { return dmuon_optimizer_destroy(&destroyed); });
  dmuon_optimizer_t wrong = reinterpret_cast<dmuon_optimizer_t>(ctx);
  expect("dmuon_optimizer_destroy(context)", DMUON_ERR_NULL_HANDLE, [&] { return dmuon_optimizer_destroy(&wrong); });
  EXPECT_EQ(wrong, reinterpret_cast<dmuon_optimizer_t>(ctx));
  std::printf("%d rows\n", rows);
}

TEST_F(BadInput, RegistrationAndQueries) {
  int id = -7;
  expect_bad_optimizer("dmuon_register", [&](dmuon_optimizer_t o) {
    return dmuon_register(o, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec, 1, 1, &id);
  });
  auto reg = [&](const std::string& row, int status, const char* name, int kind, int dtype, int ndim,
                 const int64_t* shape, double lr_mul = 1, double wd_mul = 1) {
    expect("dmuon_register(" + row + ")", status,
           [&] { return dmuon_register(open, name, kind, dtype, ndim, shape, lr_mul, wd_mul, &id); });
  };
  const int64_t zero[2] = {0, 3}, neg[2] = {4, -1}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  const std::string long_name(256, 'n');
  reg("name NULL", DMUON_ERR_NULL_POINTER, nullptr, DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec);
  reg("shape NULL", DMUON_ERR_NULL_POINTER, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, nullptr);
  reg("ndim 0", DMUON_ERR_INVALID_SHAPE, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 0, kVec);
  reg("ndim 9", DMUON_ERR_INVALID_SHAPE, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 9, nine);
  reg("extent 0", DMUON_ERR_INVALID_SHAPE, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 2, zero);
  reg("extent -1", DMUON_ERR_INVALID_SHAPE, "z", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, neg);
  reg("dtype 2", DMUON_ERR_INVALID_DTYPE, "z", DMUON_KIND_ADAM, 2, 1, kVec);
  reg("dtype -1", DMUON_ERR_INVALID_DTYPE, "z", DMUON_KIND_ADAM, -1, 1, kVec);
  reg("kind 2", DMUON_ERR_INVALID_KIND, "z", 2, DMUON_DTYPE_FP32, 1, kVec);
  reg("kind -1", DMUON_ERR_INVALID_KIND, "z", -1, DMUON_DTYPE_FP32, 1, kVec);
  reg("Muon 1-D", DMUON_ERR_MUON_NOT_2D, "z", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 1, kVec);
  reg("Muon 3-D", DMUON_ERR_MUON_NOT_2D, "z", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 3, nine);
  reg("lr_mul -1", DMUON_ERR_INVALID_VALUE, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec, -1, 1);
  reg("lr_mul NaN", DMUON_ERR_INVALID_VALUE, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec, kNaN, 1);
  reg("wd_mul -1", DMUON_ERR_INVALID_VALUE, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec, 1, -1);
  reg("wd_mul inf", DMUON_ERR_INVALID_VALUE, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec, 1, kInf);
  reg("name \"\"", DMUON_ERR_INVALID_VALUE, "", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec);
  reg("name of 256 bytes", DMUON_ERR_INVALID_VALUE, long_name.c_str(), DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec);
  reg("duplicate name", DMUON_ERR_DUPLICATE_NAME, "w", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec);
  EXPECT_NE(ctx->last_error.find("'w'"), std::string::npos) << "the message names the parameter: " << ctx->last_error;
  expect("dmuon_register(after finalize)", DMUON_ERR_ALREADY_FINALIZED,
         [&] { return dmuon_register(fin, "z", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, kVec, 1, 1, &id); });
  EXPECT_EQ(id, -7);

  expect_bad_optimizer("dmuon_optimizer_finalize", [](dmuon_optimizer_t o) { return dmuon_optimizer_finalize(o); });
  expect("dmuon_optimizer_finalize(nothing registered)", DMUON_ERR_NO_PARAMETERS, [&] { return dmuon_optimizer_finalize(empty); });
  expect("dmuon_optimizer_finalize(twice)", DMUON_ERR_ALREADY_FINALIZED, [&] { return dmuon_optimizer_finalize(fin); });

  int count = -7;
  expect_bad_optimizer("dmuon_num_params", [&](dmuon_optimizer_t o) { return dmuon_num_params(o, &count); });
  expect("dmuon_num_params(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_num_params(fin, nullptr); });
  EXPECT_EQ(count, -7);
  expect_bad_optimizer("dmuon_param_id", [&](dmuon_optimizer_t o) { return dmuon_param_id(o, "w", &id); });
  expect("dmuon_param_id(name NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_param_id(fin, nullptr, &id); });
  expect("dmuon_param_id(id NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_param_id(fin, "w", nullptr); });
  expect("dmuon_param_id(unknown)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_param_id(fin, "nope", &id); });
  EXPECT_EQ(id, -7);

  void* data = reinterpret_cast<void*>(0x1);
  expect_bad_optimizer("dmuon_param_view", [&](dmuon_optimizer_t o) { return dmuon_param_view(o, 0, &data, nullptr); });
  expect("dmuon_param_view(not finalized)", DMUON_ERR_NOT_FINALIZED, [&] { return dmuon_param_view(open, 0, &data, nullptr); });
  for (int bad : {-1, 2, 1 << 30})
    expect("dmuon_param_view(id " + std::to_string(bad) + ")", DMUON_ERR_INVALID_PARAM_ID,
           [&] { return dmuon_param_view(fin, bad, &data, nullptr); });
  EXPECT_EQ(data, reinterpret_cast<void*>(0x1));
  int64_t n = -7;
  expect_bad_optimizer("dmuon_param_numel", [&](dmuon_optimizer_t o) { return dmuon_param_numel(o, 0, &n); });
  expect("dmuon_param_numel(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_param_numel(fin, 0, nullptr); });
  expect("dmuon_param_numel(id 2)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_param_numel(fin, 2, &n); });
  expect("dmuon_param_numel(id -1)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_param_numel(open, -1, &n); });
  EXPECT_EQ(n, -7);
  float ext[12] = {};
  expect_bad_optimizer("dmuon_set_external_grad", [&](dmuon_optimizer_t o) { return dmuon_set_external_grad(o, 0, ext); });
  expect("dmuon_set_external_grad(id 2)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_set_external_grad(fin, 2, ext); });
  expect("dmuon_set_external_grad(id -1)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_set_external_grad(fin, -1, ext); });

  int owner = -7;
  expect_bad_optimizer("dmuon_param_owner", [&](dmuon_optimizer_t o) { return dmuon_param_owner(o, 0, &owner); });
  expect("dmuon_param_owner(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_param_owner(fin, 0, nullptr); });
  expect("dmuon_param_owner(not finalized)", DMUON_ERR_NOT_FINALIZED, [&] { return dmuon_param_owner(open, 0, &owner); });
  expect("dmuon_param_owner(id 2)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_param_owner(fin, 2, &owner); });
  EXPECT_EQ(owner, -7);
  int64_t bytes = -7;
  expect_bad_optimizer("dmuon_state_bytes", [&](dmuon_optimizer_t o) { return dmuon_state_bytes(o, &bytes); });
  expect("dmuon_state_bytes(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_state_bytes(fin, nullptr); });
  expect("dmuon_state_bytes(not finalized)", DMUON_ERR_NOT_FINALIZED, [&] { return dmuon_state_bytes(open, &bytes); });
  EXPECT_EQ(bytes, -7);
  std::printf("%d rows\n", rows);
}

TEST_F(BadInput, StepAndHyperParameters) {
  expect_bad_optimizer("dmuon_step", [](dmuon_optimizer_t o) { return dmuon_step(o); });
  expect("dmuon_step(not finalized)", DMUON_ERR_NOT_FINALIZED, [&] { return dmuon_step(open); });
  expect("dmuon_step(nothing registered)", DMUON_ERR_NOT_FINALIZED, [&] { return dmuon_step(empty); });
  expect_bad_optimizer("dmuon_mark_no_grad", [](dmuon_optimizer_t o) { return dmuon_mark_no_grad(o, 0); });
  expect("dmuon_mark_no_grad(id 2)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_mark_no_grad(fin, 2); });
  expect("dmuon_mark_no_grad(id -1)", DMUON_ERR_INVALID_PARAM_ID, [&] { return dmuon_mark_no_grad(fin, -1); });

  const int V = DMUON_ERR_INVALID_VALUE;
  for (dmuon_optimizer_t o : {open, fin}) {
    const std::string on = o == open ? " before finalize" : " after finalize";
    expect("dmuon_set_lr(kind 2)" + on, DMUON_ERR_INVALID_KIND, [&] { return dmuon_set_lr(o, 2, 0.1); });
    for (double x : {-1.0, kNaN, kInf})
      expect("dmuon_set_lr(" + std::to_string(x) + ")" + on, V, [&] { return dmuon_set_lr(o, DMUON_KIND_MUON, x); });
    expect("dmuon_set_weight_decay(kind -1)" + on, DMUON_ERR_INVALID_KIND, [&] { return dmuon_set_weight_decay(o, -1, 0.1); });
    expect("dmuon_set_weight_decay(-0.1)" + on, V, [&] { return dmuon_set_weight_decay(o, DMUON_KIND_ADAM, -0.1); });
    for (auto b : {std::make_pair(1.0, 0.9), std::make_pair(0.9, 1.0), std::make_pair(-0.1, 0.9), std::make_pair(kNaN, 0.9)})
      expect("dmuon_set_betas(" + std::to_string(b.first) + ", " + std::to_string(b.second) + ")" + on, V,
             [&] { return dmuon_set_betas(o, b.first, b.second); });
    for (double x : {0.0, -1.0, kNaN, kInf})
      expect("dmuon_set_eps(" + std::to_string(x) + ")" + on, V, [&] { return dmuon_set_eps(o, x); });
    for (double x : {1.0, -0.5, kNaN})
      expect("dmuon_set_momentum(" + std::to_string(x) + ")" + on, V, [&] { return dmuon_set_momentum(o, x); });
    for (double x : {kNaN, kInf})
      expect("dmuon_set_max_grad_norm(" + std::to_string(x) + ")" + on, V, [&] { return dmuon_set_max_grad_norm(o, x); });
  }
  expect_bad_optimizer("dmuon_set_lr", [](dmuon_optimizer_t o) { return dmuon_set_lr(o, DMUON_KIND_ADAM, 0.1); });
  expect_bad_optimizer("dmuon_set_weight_decay", [](dmuon_optimizer_t o) { return dmuon_set_weight_decay(o, DMUON_KIND_ADAM, 0.1); });
  expect_bad_optimizer("dmuon_set_betas", [](dmuon_optimizer_t o) { return dmuon_set_betas(o, 0.9, 0.99); });
  expect_bad_optimizer("dmuon_set_eps", [](dmuon_optimizer_t o) { return dmuon_set_eps(o, 1e-6); });
  expect_bad_optimizer("dmuon_set_momentum", [](dmuon_optimizer_t o) { return dmuon_set_momentum(o, 0.9); });
  expect_bad_optimizer("dmuon_set_max_grad_norm", [](dmuon_optimizer_t o) { return dmuon_set_max_grad_norm(o, 1.0); });

  dmuon_options_t got;
  std::memset(&got, 0x5a, sizeof got);
  expect_bad_optimizer("dmuon_get_options", [&](dmuon_optimizer_t o) { return dmuon_get_options(o, &got); });
  expect("dmuon_get_options(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_get_options(fin, nullptr); });
  EXPECT_EQ(got.magic, 0x5a5a5a5au);
  int64_t steps = -7;
  expect_bad_optimizer("dmuon_get_step_count", [&](dmuon_optimizer_t o) { return dmuon_get_step_count(o, &steps); });
  expect("dmuon_get_step_count(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_get_step_count(fin, nullptr); });
  EXPECT_EQ(steps, -7);
  dmuon_clip_stats_t st{-7, -7, -7, -7, -7};
  expect_bad_optimizer("dmuon_get_clip_stats", [&](dmuon_optimizer_t o) { return dmuon_get_clip_stats(o, &st); });
  expect("dmuon_get_clip_stats(NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_get_clip_stats(fin, nullptr); });
  expect("dmuon_get_clip_stats(not finalized)", DMUON_ERR_NOT_FINALIZED, [&] { return dmuon_get_clip_stats(open, &st); });
  EXPECT_EQ(st.clipped, -7);
  std::printf("%d rows\n", rows);
}

TEST_F(BadInput, Checkpoints) {
  const std::string d = dir.string();
  expect_bad_optimizer("dmuon_checkpoint_save", [&](dmuon_optimizer_t o) { return dmuon_checkpoint_save(o, d.c_str(), 1, nullptr); });
  expect("dmuon_checkpoint_save(dir NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_checkpoint_save(fin, nullptr, 1, nullptr); });
  expect("dmuon_checkpoint_save(not finalized)", DMUON_ERR_NOT_FINALIZED,
         [&] { return dmuon_checkpoint_save(open, d.c_str(), 1, nullptr); });
  dmuon_checkpoint_options_t co = DMUON_CHECKPOINT_OPTIONS_INIT;
  co.version = 0;
  expect("dmuon_checkpoint_save(options version 0)", DMUON_ERR_OPTIONS_VERSION,
         [&] { return dmuon_checkpoint_save(fin, d.c_str(), 1, &co); });
  co = DMUON_CHECKPOINT_OPTIONS_INIT;
  co.struct_size = 4;
  expect("dmuon_checkpoint_save(options size 4)", DMUON_ERR_OPTIONS_VERSION,
         [&] { return dmuon_checkpoint_save(fin, d.c_str(), 1, &co); });
  co = DMUON_CHECKPOINT_OPTIONS_INIT;
  co.version = 99;
  expect("dmuon_checkpoint_save(options version 99)", DMUON_ERR_OPTIONS_VERSION,
         [&] { return dmuon_checkpoint_save(fin, d.c_str(), 1, &co); });
  co = DMUON_CHECKPOINT_OPTIONS_INIT;
  co.struct_size = sizeof co + 8;
  expect("dmuon_checkpoint_save(options larger than the library's)", DMUON_ERR_OPTIONS_VERSION,
         [&] { return dmuon_checkpoint_save(fin, d.c_str(), 1, &co); });
  co = DMUON_CHECKPOINT_OPTIONS_INIT;
  co.keep_last = -1;
  expect("dmuon_checkpoint_save(keep_last -1)", DMUON_ERR_INVALID_VALUE,
         [&] { return dmuon_checkpoint_save(fin, d.c_str(), 1, &co); });
  expect("dmuon_checkpoint_save(dir \"\")", DMUON_ERR_INVALID_VALUE, [&] { return dmuon_checkpoint_save(fin, "", 1, nullptr); });
  // A directory that cannot be made: under a regular file.
  const std::string file = d + "/plain.txt";
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not a checkpoint\n", f);
  std::fclose(f);
  expect("dmuon_checkpoint_save(dir under a file)", DMUON_ERR_IO,
         [&] { return dmuon_checkpoint_save(fin, (file + "/sub").c_str(), 1, nullptr); });

  int64_t user_step = -7;
  expect_bad_optimizer("dmuon_checkpoint_restore", [&](dmuon_optimizer_t o) { return dmuon_checkpoint_restore(o, d.c_str(), &user_step); });
  expect("dmuon_checkpoint_restore(path NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_checkpoint_restore(fin, nullptr, &user_step); });
  expect("dmuon_checkpoint_restore(not finalized)", DMUON_ERR_NOT_FINALIZED,
         [&] { return dmuon_checkpoint_restore(open, d.c_str(), &user_step); });
  expect("dmuon_checkpoint_restore(missing file)", DMUON_ERR_NOT_FOUND,
         [&] { return dmuon_checkpoint_restore(fin, (d + "/none.h5").c_str(), &user_step); });
  expect("dmuon_checkpoint_restore(directory without checkpoints)", DMUON_ERR_NOT_FOUND,
         [&] { return dmuon_checkpoint_restore(fin, d.c_str(), &user_step); });
  expect("dmuon_checkpoint_restore(a text file)", DMUON_ERR_CHECKPOINT_CORRUPT,
         [&] { return dmuon_checkpoint_restore(fin, file.c_str(), &user_step); });
  EXPECT_EQ(user_step, -7);

  expect_bad_optimizer("dmuon_checkpoint_set_attribute", [](dmuon_optimizer_t o) { return dmuon_checkpoint_set_attribute(o, "k", "v"); });
  expect("dmuon_checkpoint_set_attribute(key NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_checkpoint_set_attribute(fin, nullptr, "v"); });
  expect("dmuon_checkpoint_set_attribute(value NULL)", DMUON_ERR_NULL_POINTER, [&] { return dmuon_checkpoint_set_attribute(fin, "k", nullptr); });
  for (const char* key : {"", "a/b", ".hidden", "dmuon.plan"})
    expect(std::string("dmuon_checkpoint_set_attribute(\"") + key + "\")", DMUON_ERR_INVALID_VALUE,
           [&] { return dmuon_checkpoint_set_attribute(fin, key, "v"); });
  char buf[16] = "untouched";
  expect_bad_optimizer("dmuon_checkpoint_get_attribute", [&](dmuon_optimizer_t o) { return dmuon_checkpoint_get_attribute(o, "run", buf, sizeof buf); });
  expect("dmuon_checkpoint_get_attribute(key NULL)", DMUON_ERR_NULL_POINTER,
         [&] { return dmuon_checkpoint_get_attribute(fin, nullptr, buf, sizeof buf); });
  expect("dmuon_checkpoint_get_attribute(buf NULL)", DMUON_ERR_NULL_POINTER,
         [&] { return dmuon_checkpoint_get_attribute(fin, "run", nullptr, 16); });
  // Set but never restored: get reads restored attributes only.
  expect("dmuon_checkpoint_get_attribute(before any restore)", DMUON_ERR_NOT_FOUND,
         [&] { return dmuon_checkpoint_get_attribute(fin, "run", buf, sizeof buf); });
  EXPECT_STREQ(buf, "untouched");
  std::printf("%d rows\n", rows);
}

}  // namespace
