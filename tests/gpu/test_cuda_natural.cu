// GPU code as a user writes it from dmuon.h and the backends guide: the
// gradients go into the device views with a plain cudaMemcpy, dmuon_step(),
// the parameters come back with a plain cudaMemcpy, and nothing in between
// waits for the device. The step's stream contract must make that correct:
// every parameter against the float64 reference after every step, eager and
// with the whole-step graph, and the same with a stream of the user's own
// (cudaMemcpyAsync on it, one cudaStreamSynchronize before the host reads).
// Each rank writes a different share of the gradients (rank_share).
#include <cmath>
#include <cstring>

#include "gpu/gpu_model.hpp"

namespace {

using gputest::Spec;

// Large enough that a step takes longer than the copies around it, so that a
// copy that overtook the step would change what the step reads or returns.
const std::vector<Spec> kModel = {
    {"w1", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 512}},
    {"w2", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {256, 512}},
    {"w3", DMUON_KIND_MUON, DMUON_DTYPE_BF16, {384, 192}},
    {"w4", DMUON_KIND_MUON, DMUON_DTYPE_FP32, {320, 320}},
    {"big", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {2000003}},
    {"emb", DMUON_KIND_ADAM, DMUON_DTYPE_BF16, {300, 1001}},
};

struct Natural {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  cudaStream_t user = nullptr;  // null: plain cudaMemcpy on the default stream
  std::vector<void*> data, grad;

  Natural(const dmuon_options_t& o, cudaStream_t s) : user(s) {
    EXPECT_EQ(dmuon_context_create(MPI_COMM_WORLD, "cuda", &ctx), DMUON_SUCCESS) << dmuon_context_last_error(nullptr);
    EXPECT_EQ(dmuon_optimizer_create(ctx, &o, &opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    for (const Spec& p : kModel)
      EXPECT_EQ(dmuon_register(opt, p.name.c_str(), p.kind, p.dtype, int(p.shape.size()), p.shape.data(), 1.0, 1.0,
                               nullptr),
                DMUON_SUCCESS);
    EXPECT_EQ(dmuon_optimizer_finalize(opt), DMUON_SUCCESS) << dmuon_context_last_error(ctx);
    for (std::size_t k = 0; k < kModel.size(); ++k) {
      void *d = nullptr, *g = nullptr;
      EXPECT_EQ(dmuon_param_view(opt, int(k), &d, &g), DMUON_SUCCESS);
      data.push_back(d);
      grad.push_back(g);
    }
  }
  ~Natural() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
  void to_device(void* dst, const std::vector<double>& v, int dtype) {
    std::vector<char> host(v.size() * (dtype == DMUON_DTYPE_BF16 ? 2 : 4));
    ref::store(host.data(), dtype, v);
    const cudaError_t rc = user ? cudaMemcpyAsync(dst, host.data(), host.size(), cudaMemcpyHostToDevice, user)
                                : cudaMemcpy(dst, host.data(), host.size(), cudaMemcpyHostToDevice);
    EXPECT_EQ(rc, cudaSuccess);
  }
  std::vector<double> to_host(int k) {
    const Spec& s = kModel[std::size_t(k)];
    std::vector<char> host(s.bytes());
    if (user) {
      EXPECT_EQ(cudaMemcpyAsync(host.data(), data[std::size_t(k)], host.size(), cudaMemcpyDeviceToHost, user), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(user), cudaSuccess);  // as any reader of an async copy must
    } else {
      EXPECT_EQ(cudaMemcpy(host.data(), data[std::size_t(k)], host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return ref::load(host.data(), s.dtype, s.numel());
  }
};

void run(int step_graph, bool user_stream) {
  cudaStream_t user = nullptr;
  if (user_stream) ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.cuda_step_graph = step_graph;
  o.cuda_stream = user;
  o.muon_lr = 0.05;
  o.adam_lr = 0.01;
  const int rank = gputest::rank_in(MPI_COMM_WORLD), world = gputest::size_of(MPI_COMM_WORLD);
  {
    Natural n(o, user);
    std::vector<std::vector<double>> p(kModel.size());
    for (std::size_t k = 0; k < kModel.size(); ++k) {
      p[k].resize(std::size_t(kModel[k].numel()));
      for (std::size_t i = 0; i < p[k].size(); ++i) p[k][i] = ref::round_to(kModel[k].dtype, gputest::init_value(int(k), int64_t(i)));
      n.to_device(n.data[k], p[k], kModel[k].dtype);
    }
    std::vector<ref::AdamState> adam(kModel.size());
    std::vector<ref::MuonState> muon(kModel.size());
    for (int step = 0; step < 4; ++step) {  // eager warm-up, capture, two replays with the graph on
      std::vector<std::vector<double>> g(kModel.size());
      for (std::size_t k = 0; k < kModel.size(); ++k) {
        g[k].resize(p[k].size());
        std::vector<double> mine(g[k].size());
        for (std::size_t i = 0; i < g[k].size(); ++i) {
          g[k][i] = ref::round_to(kModel[k].dtype, gputest::grad_value(step, int(k), int64_t(i)));
          mine[i] = gputest::rank_share(g[k][i], rank, world);
        }
        n.to_device(n.grad[k], mine, kModel[k].dtype);
      }
      ASSERT_EQ(dmuon_step(n.opt), DMUON_SUCCESS) << dmuon_context_last_error(n.ctx);
      for (std::size_t k = 0; k < kModel.size(); ++k) {
        const Spec& s = kModel[k];
        const std::vector<double> got = n.to_host(int(k));
        std::vector<double> expect = p[k];
        if (s.kind == DMUON_KIND_MUON) {
          ref::muon_step(expect, g[k], muon[k], s.shape[0], s.shape[1], o);
          double num = 0, den = 0, quant = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            const double dg = got[i] - p[k][i], dr = expect[i] - p[k][i];
            num += (dg - dr) * (dg - dr);
            den += dr * dr;
            quant += s.dtype == DMUON_DTYPE_BF16 ? (expect[i] / 256) * (expect[i] / 256) : 0.0;
          }
          // The bf16 Newton-Schulz tolerance of test_cuda_muon: 4% of the update.
          EXPECT_LT(std::sqrt(num), std::sqrt(0.04 * 0.04 * den + quant))
              << s.name << " step " << step << ": relative error " << std::sqrt(num / den);
          p[k] = got;  // the next step's reference starts from what the GPU holds
        } else {
          ref::adamw_step(expect, g[k], adam[k], o.adam_lr, o.adam_beta1, o.adam_beta2, o.adam_eps, o.adam_weight_decay);
          for (double& x : expect) x = ref::round_to(s.dtype, x);
          int bad = 0;
          std::size_t first = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            const double tol = s.dtype == DMUON_DTYPE_BF16 ? std::fabs(expect[i]) / 128 + 1e-6 : 1e-5 * std::fabs(expect[i]) + 1e-6;
            if (std::fabs(got[i] - expect[i]) > tol && bad++ == 0) first = i;
          }
          EXPECT_EQ(bad, 0) << s.name << " step " << step << ": first at " << first << " got " << got[first] << " expected "
                            << expect[first];
          p[k] = expect;
        }
      }
      if (::testing::Test::HasFailure()) break;
    }
  }
  if (user) cudaStreamDestroy(user);
}

TEST(CudaNatural, DefaultStreamEager) { run(0, false); }
TEST(CudaNatural, DefaultStreamWholeStepGraph) { run(1, false); }
TEST(CudaNatural, UserStreamEager) { run(0, true); }
TEST(CudaNatural, UserStreamWholeStepGraph) { run(1, true); }

}  // namespace
