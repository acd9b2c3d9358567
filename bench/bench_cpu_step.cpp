// The CPU backend's multi-rank step beside what it needs, all timed in the
// same run, at whatever number of ranks it is started on.
//
// --mode comm: for N fp32 elements (--params), the median of interleaved
// repetitions of
//   - a plain MPI_Allreduce (in place) of the N floats, and the backend's
//     allreduce_gradients of the same buffer (blocking path, then the watchdog
//     path that collective_timeout_ms selects);
//   - a plain MPI_Reduce_scatter_block + MPI_Allgather of N/ranks per rank,
//     and the backend's reduce_scatter_average + allgather of the same;
//   - the Adam pass (dmuon_step of an Adam-only model on MPI_COMM_SELF, every
//     rank at once, fp32 and bf16) beside a memcpy of the same bytes, both in
//     CPU time (the slowest rank's), which other work on the cores cannot inflate;
//   - dmuon_step of the same Adam-only model (fp32) on all ranks, beside its
//     floor: the plain all-reduce plus the fp32 Adam pass (both wall time).
// Ratios are plain time / dmuon time (1 = as fast; the goals are >= 0.9 for
// the collectives and >= 0.7 for the bf16 Adam pass) and step / floor.
//
// --mode model: the step latency of a small model (--model demo: the demo's
// MLP, 9-64-64-64-1 with Muon on the two hidden matrices; --model mlp256:
// 9-256x4-1 with Muon on the three 256x256 matrices), median over --iters
// steps, beside its floor: one plain MPI_Allreduce of the gradient bytes plus
// one memcpy pass over the optimizer's bytes (parameters, gradients, state);
// and beside that floor plus the Newton-Schulz of the busiest rank's own
// matrices (the same call the step makes, timed alone), which on a CPU is
// most of a Muon step.
#include <mpi.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/cpu_newton_schulz.hpp"
#include "bench_common.hpp"
#include "dmuon/dmuon.h"

namespace po = boost::program_options;
using bench::check;
using bench::now;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// This thread's CPU seconds: what a pass without communication costs, robust
// to other work sharing the cores (a shared machine's load only delays it).
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Seconds of f on every rank, from a barrier to the slowest rank's end: wall
// time, or with `cpu` the slowest rank's CPU time.
double timed(const std::function<void()>& f, bool cpu = false) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = cpu ? cpu_now() : now();
  f();
  double dt = (cpu ? cpu_now() : now()) - t0;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return dt;
}

struct Model {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  double bytes = 0;  // parameters, gradients and optimizer state
  double grad_bytes = 0;
  ~Model() {
    dmuon_optimizer_destroy(&opt);
    dmuon_context_destroy(&ctx);
  }
};

// An optimizer on `comm` over `params` (name, kind, dtype, shape), gradients
// and parameters filled with small values.
struct Spec {
  int kind, dtype;
  std::vector<int64_t> shape;
};
std::unique_ptr<Model> make_model(MPI_Comm comm, const std::vector<Spec>& params, double max_grad_norm) {
  auto m = std::make_unique<Model>();
  check(dmuon_context_create(comm, "cpu", &m->ctx), m->ctx, "context");
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = max_grad_norm;
  check(dmuon_optimizer_create(m->ctx, &o, &m->opt), m->ctx, "optimizer");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string name = "p" + std::to_string(i);
    check(dmuon_register(m->opt, name.c_str(), params[i].kind, params[i].dtype, static_cast<int>(params[i].shape.size()),
                         params[i].shape.data(), 1.0, 1.0, nullptr),
          m->ctx, "register");
  }
  check(dmuon_optimizer_finalize(m->opt), m->ctx, "finalize");
  for (std::size_t i = 0; i < params.size(); ++i) {
    void *p = nullptr, *g = nullptr;
    int64_t numel = 0;
    dmuon_param_view(m->opt, static_cast<int>(i), &p, &g);
    dmuon_param_numel(m->opt, static_cast<int>(i), &numel);
    const int elem = params[i].dtype == DMUON_DTYPE_BF16 ? 2 : 4;
    // 0x3c3c...: about 0.0115 in fp32 and in bf16.
    std::memset(g, 0x3c, static_cast<std::size_t>(numel) * elem);
    std::memset(p, 0x3c, static_cast<std::size_t>(numel) * elem);
    const double state = params[i].kind == DMUON_KIND_ADAM ? 8.0 : 4.0;  // fp32 moments / momentum
    m->bytes += static_cast<double>(numel) * (2 * elem + state);
    m->grad_bytes += static_cast<double>(numel) * elem;
  }
  return m;
}

std::vector<Spec> adam_only(int64_t total, int tensors, int dtype) {
  std::vector<Spec> out;
  for (int i = 0; i < tensors; ++i) {
    const int64_t n = total / tensors + (i < total % tensors ? 1 : 0);
    out.push_back({DMUON_KIND_ADAM, dtype, {n}});
  }
  return out;
}

// A memcpy moving `bytes` in total (reads plus writes), kept allocated so
// that it can be timed round by round beside what it is compared with.
struct Copy {
  std::vector<char> src, dst;
  int round = 0;
  explicit Copy(double bytes) : src(static_cast<std::size_t>(bytes / 2), 1), dst(src.size(), 0) {}
  double seconds(bool cpu) {  // one timed copy
    src[static_cast<std::size_t>(round++) % src.size()] = static_cast<char>(round);
    return timed([&] { std::memcpy(dst.data(), src.data(), src.size()); }, cpu);
  }
};

// Median of `reps` copies after one warm-up (CPU time with `cpu`).
double copy_seconds(double bytes, int reps, bool cpu = false) {
  Copy c(bytes);
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    const double dt = c.seconds(cpu);
    if (r > 0) t.push_back(dt);
  }
  return median(t);
}

void comm_mode(int64_t total, int tensors, int reps) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int64_t segment = total / world, n = segment * world;  // the Muon layout: equal segments
  std::unique_ptr<dmuon::Backend> be = dmuon::make_cpu_backend(MPI_COMM_WORLD);
  auto* buf = static_cast<float*>(be->allocate(static_cast<std::size_t>(n) * 4));
  std::vector<float> send(static_cast<std::size_t>(n)), mine(static_cast<std::size_t>(segment));
  std::fill(buf, buf + n, 1.0f);
  std::fill(send.begin(), send.end(), 1.0f);
  const int count = static_cast<int>(std::min<int64_t>(n, INT32_MAX));
  std::vector<double> t_ar, t_dar, t_dar_w, t_rsag, t_drsag, t_drsag_w;
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms up (pages, MPI's buffers)
    const bool keep = r > 0;
    auto note = [&](std::vector<double>& v, double dt) { if (keep) v.push_back(dt); };
    note(t_ar, timed([&] { MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }));
    std::fill(buf, buf + n, 1.0f);  // the sums must not grow towards overflow
    be->set_collective_timeout(0);
    note(t_dar, timed([&] { be->allreduce_gradients(buf, n, dmuon::Dtype::fp32); }));
    be->set_collective_timeout(600000);
    note(t_dar_w, timed([&] { be->allreduce_gradients(buf, n, dmuon::Dtype::fp32); }));
    note(t_rsag, timed([&] {
      MPI_Reduce_scatter_block(send.data(), mine.data(), static_cast<int>(segment), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, send.data(), static_cast<int>(segment), MPI_FLOAT, MPI_COMM_WORLD);
    }));
    std::fill(send.begin(), send.end(), 1.0f);
    be->set_collective_timeout(0);
    note(t_drsag, timed([&] {
      be->reduce_scatter_average(buf, segment, dmuon::Dtype::fp32);
      be->allgather(buf, segment, dmuon::Dtype::fp32);
    }));
    be->set_collective_timeout(600000);
    note(t_drsag_w, timed([&] {
      be->reduce_scatter_average(buf, segment, dmuon::Dtype::fp32);
      be->allgather(buf, segment, dmuon::Dtype::fp32);
    }));
  }
  be->release(buf);
  be.reset();
  std::vector<float>().swap(send);

  // The Adam pass alone: one rank's optimizer each, all ranks at once, and a
  // memcpy of its bytes timed in the same rounds (a shared machine's slow
  // spells then slow both).
  double adam[2] = {0, 0}, copy[2] = {0, 0}, adam_wall = 0;
  const int dtypes[2] = {DMUON_DTYPE_FP32, DMUON_DTYPE_BF16};
  for (int d = 0; d < 2; ++d) {
    auto m = make_model(MPI_COMM_SELF, adam_only(total, tensors, dtypes[d]), 0.0);
    // Bytes of the pass: read p, g, m, v; write p, m, v.
    Copy c((dtypes[d] == DMUON_DTYPE_BF16 ? 22.0 : 28.0) * static_cast<double>(total));
    std::vector<double> t, tc;
    for (int r = 0; r < reps + 1; ++r) {
      const double dt = timed([&] { check(dmuon_step(m->opt), m->ctx, "step"); }, true);
      const double dc = c.seconds(true);
      if (r > 0) t.push_back(dt), tc.push_back(dc);
    }
    adam[d] = median(t);
    copy[d] = median(tc);
    if (dtypes[d] == DMUON_DTYPE_FP32) {  // the floor's share, on the clock the step is timed with
      t.clear();
      for (int r = 0; r < reps; ++r) t.push_back(timed([&] { check(dmuon_step(m->opt), m->ctx, "step"); }));
      adam_wall = median(t);
    }
  }
  // The whole step on all ranks, fp32 Adam: all-reduce, then the pass.
  double step = 0;
  {
    auto m = make_model(MPI_COMM_WORLD, adam_only(total, tensors, DMUON_DTYPE_FP32), 0.0);
    std::vector<double> t;
    for (int r = 0; r < reps + 1; ++r) {
      const double dt = timed([&] { check(dmuon_step(m->opt), m->ctx, "step"); });
      if (r > 0) t.push_back(dt);
    }
    step = median(t);
  }
  const double ar = median(t_ar), dar = median(t_dar), dar_w = median(t_dar_w);
  const double rsag = median(t_rsag), drsag = median(t_drsag), drsag_w = median(t_drsag_w);
  if (rank == 0)
    std::printf("comm ranks=%d params=%lld allreduce_ms=%.2f dmuon_allreduce_ms=%.2f ar_ratio=%.3f "
                "dmuon_allreduce_watchdog_ms=%.2f ar_watchdog_ratio=%.3f rsag_ms=%.2f dmuon_rsag_ms=%.2f "
                "rsag_ratio=%.3f dmuon_rsag_watchdog_ms=%.2f rsag_watchdog_ratio=%.3f adam_fp32_ms=%.2f "
                "copy_fp32_ms=%.2f adam_fp32_ratio=%.3f adam_bf16_ms=%.2f copy_bf16_ms=%.2f adam_bf16_ratio=%.3f "
                "adam_fp32_wall_ms=%.2f step_ms=%.2f floor_ms=%.2f step_over_floor=%.3f\n",
                world, static_cast<long long>(n), ar * 1e3, dar * 1e3, ar / dar, dar_w * 1e3, ar / dar_w, rsag * 1e3,
                drsag * 1e3, rsag / drsag, drsag_w * 1e3, rsag / drsag_w, adam[0] * 1e3, copy[0] * 1e3,
                copy[0] / adam[0], adam[1] * 1e3, copy[1] * 1e3, copy[1] / adam[1], adam_wall * 1e3, step * 1e3,
                (ar + adam_wall) * 1e3, step / (ar + adam_wall));
}

std::vector<Spec> mlp(int n_in, int width, int hidden_layers, int n_out) {
  std::vector<Spec> out;
  std::vector<int64_t> dims = {n_in};
  for (int l = 0; l < hidden_layers; ++l) dims.push_back(width);
  dims.push_back(n_out);
  const std::size_t linears = dims.size() - 1;
  for (std::size_t l = 0; l < linears; ++l) {
    const bool hidden = l > 0 && l + 1 < linears;  // Muon on the hidden matrices, as the demo
    out.push_back({hidden ? DMUON_KIND_MUON : DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {dims[l + 1], dims[l]}});
    out.push_back({DMUON_KIND_ADAM, DMUON_DTYPE_FP32, {dims[l + 1]}});
  }
  return out;
}

void model_mode(const std::string& which, int iters) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::vector<Spec> params = which == "demo" ? mlp(9, 64, 3, 1) : mlp(9, 256, 4, 1);
  auto m = make_model(MPI_COMM_WORLD, params, 0.0);
  std::vector<double> t;
  for (int i = 0; i < iters + 3; ++i) {
    const double dt = timed([&] { check(dmuon_step(m->opt), m->ctx, "step"); });
    if (i >= 3) t.push_back(dt);
  }
  // The floor: one all-reduce of the gradient bytes, one pass over the bytes.
  std::vector<float> g(static_cast<std::size_t>(m->grad_bytes / 4), 1.0f);
  std::vector<double> ta;
  for (int i = 0; i < iters + 3; ++i) {
    const double dt = timed([&] {
      MPI_Allreduce(MPI_IN_PLACE, g.data(), static_cast<int>(g.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    });
    std::fill(g.begin(), g.end(), 1.0f);
    if (i >= 3) ta.push_back(dt);
  }
  const double step = median(t), ar = median(ta), pass = copy_seconds(m->bytes, iters);
  // Newton-Schulz of this rank's own Muon matrices, as the step runs it; the busiest rank counts.
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  const auto coeffs = dmuon::ns_coefficients(o.muon_ns_schedule, o.muon_ns_steps);
  std::vector<double> tn;
  for (int i = 0; i < iters + 3; ++i) {
    double ns = 0;
    for (std::size_t id = 0; id < params.size(); ++id) {
      int owner = -1;
      check(dmuon_param_owner(m->opt, static_cast<int>(id), &owner), m->ctx, "owner");
      if (params[id].kind != DMUON_KIND_MUON || owner != rank) continue;
      const long k = static_cast<long>(std::min(params[id].shape[0], params[id].shape[1]));
      const long n = static_cast<long>(std::max(params[id].shape[0], params[id].shape[1]));
      std::vector<float> work(dmuon::cpu_ns_workspace_floats(1, k, n), 0.01f);
      const double t0 = now();
      dmuon::cpu_newton_schulz(work.data(), 1, k, n, coeffs, dmuon::ns_norm_factor(o.muon_ns_schedule),
                               static_cast<float>(o.muon_ns_eps), dmuon::kCpuSymmetricProduct,
                               dmuon::cpu_ns_iteration(k, n));
      ns += now() - t0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &ns, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 3) tn.push_back(ns);
  }
  const double ns = median(tn), floor = ar + pass;
  if (rank == 0)
    std::printf("model=%s ranks=%d params_bytes=%.0f step_us=%.1f allreduce_us=%.1f pass_us=%.1f floor_us=%.1f "
                "step_over_floor=%.2f ns_us=%.1f step_over_floor_ns=%.2f\n",
                which.c_str(), world, m->bytes, step * 1e6, ar * 1e6, pass * 1e6, floor * 1e6, step / floor, ns * 1e6,
                step / (floor + ns));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  po::options_description desc("bench_cpu_step: the CPU step's collectives and Adam pass against plain MPI and memcpy");
  std::string mode, params_s, model;
  int tensors = 300, reps = 5, iters = 200;
  desc.add_options()("help", "this text")("mode", po::value(&mode)->default_value("comm"), "comm or model")(
      "params", po::value(&params_s)->default_value("50M"), "comm: elements (K/M/G suffix)")(
      "tensors", po::value(&tensors)->default_value(300), "comm: Adam tensors")(
      "reps", po::value(&reps)->default_value(5), "comm: timed repetitions (median)")(
      "model", po::value(&model)->default_value("demo"), "model: demo or mlp256")(
      "iters", po::value(&iters)->default_value(200), "model: timed steps (median)");
  po::variables_map vm;
  if (!bench::parse_options(argc, argv, desc, vm)) {
    MPI_Finalize();
    return 2;
  }
  if (vm.count("help")) {
    std::printf("%s", bench::help_text(desc).c_str());
  } else if (mode == "comm") {
    comm_mode(bench::parse_count(params_s), tensors, reps);
  } else if (mode == "model" && (model == "demo" || model == "mlp256")) {
    model_mode(model, iters);
  } else {
    std::fprintf(stderr, "bench_cpu_step: --mode comm|model, --model demo|mlp256\n");
    MPI_Finalize();
    return 2;
  }
  MPI_Finalize();
  return 0;
}
