// Newton-Schulz on the CPU backend beside the sgemm rate measured in the same
// run, and the whole optimizer step of a fixed model.
//
// --mode ns (one rank): for each shape k x n (k <= n after the transpose Muon
// does), the time of the NS call the step makes (normalise + iterations), with
// flops counted as full GEMMs: per iteration 2k^2n (X X^T) + 2k^3 (A A) +
// 2k^2n (B X). Beside it, in the same run: the sgemm rate of the iteration's
// three products as plain back-to-back sgemm calls; NS again with SYRK for its two
// symmetric products, and those products (X X^T, A A) alone both ways (the
// decision between them, docs/decisions.md); and Gram Newton-Schulz with the
// SYRK products (speedup = syrk_ms / gram_ms; step = what the CPU Muon step
// uses for the shape). Times in ms; ratio = NS GF/s over the sgemm GF/s of
// the same shape.
//
// --mode step (any number of ranks): dmuon_step on a fixed mixed model, the
// median over the timed steps of the slowest rank, and beside it the
// Newton-Schulz time of the busiest rank's own matrices (the rest of the step
// is collectives, momentum, update and Adam).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "backends/cpu/cpu_blas.hpp"
#include "backends/cpu/cpu_newton_schulz.hpp"
#include "core/newton_schulz.hpp"
#include "dmuon/dmuon.h"

namespace po = boost::program_options;
using namespace dmuon;

namespace {

// Wall time, or this process's CPU time: on a machine shared with other work,
// CPU time with one BLAS thread counts only this program's own cycles, so the
// ratio of two measurements survives the neighbours (--clock cpu).
bool g_cpu_clock = false;
double now() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best time of `repeats` calls of f, after prepare() (not timed) before each.
template <class Prepare, class F>
double best_of(int repeats, Prepare prepare, F f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    prepare();
    const double t0 = now();
    f();
    best = std::min(best, now() - t0);
  }
  return best;
}

std::vector<std::pair<long, long>> parse_shapes(const std::string& s) {
  std::vector<std::pair<long, long>> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto x = item.find('x');
    if (x == std::string::npos) throw std::runtime_error("shape '" + item + "' is not RxC");
    out.emplace_back(std::stol(item.substr(0, x)), std::stol(item.substr(x + 1)));
  }
  return out;
}

void fill(std::vector<float>& v, unsigned seed) {
  unsigned s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
}

void bench_ns(const std::vector<std::pair<long, long>>& shapes, int steps, int repeats, int batch) {
  std::printf("%-10s %5s | %8s %8s %6s | %8s %8s %6s | %8s %8s %-5s | %9s %9s | %8s %8s %8s %8s\n", "shape", "batch",
              "ns_ms", "GF/s", "ratio", "syrk_ms", "GF/s", "ratio", "gram_ms", "speedup", "step", "gemm_GF/s",
              "peak_GF/s", "xxt_gemm", "xxt_syrk", "aa_gemm", "aa_syrk");
  // A large square sgemm as the machine's reference rate, once per run.
  const int big = 2048;
  std::vector<float> pa(static_cast<std::size_t>(big) * big), pb(pa.size()), pc(pa.size());
  fill(pa, 1);
  fill(pb, 2);
  const double t_peak = best_of(std::max(2, repeats / 3), [] {}, [&] {
    sgemm_row_major(false, big, big, big, 1.0f, pa.data(), pb.data(), 0.0f, pc.data());
  });
  const double peak = 2.0 * big * big * static_cast<double>(big) / t_peak / 1e9;

  for (const auto& [rows, cols] : shapes) {
    const long k = std::min(rows, cols), n = std::max(rows, cols);
    const auto coeffs = ns_coefficients(DMUON_NS_QUINTIC, steps);
    std::vector<float> input(static_cast<std::size_t>(batch * k * n)), work(cpu_ns_workspace_floats(batch, k, n));
    fill(input, 3);
    auto reset = [&] { std::memcpy(work.data(), input.data(), input.size() * sizeof(float)); };
    auto run_ns = [&](SymmetricProduct p, NsIteration it = NsIteration::plain) {
      return best_of(repeats, reset, [&] { cpu_newton_schulz(work.data(), batch, k, n, coeffs, 1.0, 1e-7f, p, it); });
    };
    const double t_ns = run_ns(SymmetricProduct::sgemm);
    const double flops = batch * steps * (4.0 * k * k * n + 2.0 * k * k * k);

    // The sgemm rate on the same work: the iteration's three products (X X^T,
    // A A, B X) as plain sgemm calls, back to back, `steps` times: the same
    // flops over the same time span, so both see the same machine.
    std::vector<float> a(static_cast<std::size_t>(k * k)), x(static_cast<std::size_t>(k * n)), c(x.size());
    std::vector<float> b2(a.size());
    fill(a, 4);
    fill(x, 5);
    const int ki = static_cast<int>(k), ni = static_cast<int>(n);
    const double t_gemm = best_of(repeats, [] {}, [&] {
      for (int it = 0; it < steps * batch; ++it) {
        sgemm_row_major(true, ki, ki, ni, 1.0f, x.data(), x.data(), 0.0f, a.data());
        sgemm_row_major(false, ki, ki, ki, 1.0f, a.data(), a.data(), 0.0f, b2.data());
        sgemm_row_major(false, ki, ni, ki, 1.0f, b2.data(), x.data(), 0.0f, c.data());
      }
    });
    const double gemm_rate = flops / t_gemm / 1e9;
    // X X^T both ways (the symmetric product's decision).
    const double t_xxt_gemm = best_of(repeats, [] {}, [&] {
      sgemm_row_major(true, static_cast<int>(k), static_cast<int>(k), static_cast<int>(n), 1.0f, x.data(), x.data(),
                      0.0f, a.data());
    });
    const double t_xxt_syrk = best_of(repeats, [] {}, [&] {
      ssyrk_row_major(static_cast<int>(k), static_cast<int>(n), 1.0f, x.data(), 0.0f, a.data());
    });
    // A A for the symmetric A just formed, both ways.
    std::vector<float> b(a.size());
    const double t_aa_gemm = best_of(repeats, [] {}, [&] {
      sgemm_row_major(false, static_cast<int>(k), static_cast<int>(k), static_cast<int>(k), 1.0f, a.data(), a.data(),
                      0.0f, b.data());
    });
    const double t_aa_syrk = best_of(repeats, [] {}, [&] {
      ssyrk_row_major(static_cast<int>(k), static_cast<int>(k), 1.0f, a.data(), 0.0f, b.data());
    });
    const double t_ns_syrk = run_ns(SymmetricProduct::ssyrk);
    // Gram Newton-Schulz with the step's products, where its workspace fits.
    const double t_gram = gram_ns_fits(k, n) ? run_ns(kCpuSymmetricProduct, NsIteration::gram) : 0.0;
    const double ns_rate = flops / t_ns / 1e9, syrk_rate = flops / t_ns_syrk / 1e9;
    char shape[32];
    std::snprintf(shape, sizeof shape, "%ldx%ld", rows, cols);
    char gram[48] = "       -        -";
    if (t_gram > 0) std::snprintf(gram, sizeof gram, "%8.2f %8.2f", t_gram * 1e3, t_ns_syrk / t_gram);
    std::printf("%-10s %5d | %8.2f %8.1f %6.2f | %8.2f %8.1f %6.2f | %s %-5s | %9.1f %9.1f | %8.3f %8.3f %8.3f %8.3f\n",
                shape, batch, t_ns * 1e3, ns_rate, ns_rate / gemm_rate, t_ns_syrk * 1e3, syrk_rate,
                syrk_rate / gemm_rate, gram, cpu_ns_iteration(k, n) == NsIteration::gram ? "gram" : "plain", gemm_rate,
                peak, t_xxt_gemm * 1e3, t_xxt_syrk * 1e3, t_aa_gemm * 1e3, t_aa_syrk * 1e3);
    std::fflush(stdout);
  }
}

void check(int rc, dmuon_context_t ctx, const char* what) {
  if (rc == DMUON_SUCCESS) return;
  std::fprintf(stderr, "%s: %s (%s)\n", what, dmuon_error_string(rc), dmuon_context_last_error(ctx));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// The fixed model: `layers` hidden matrices width x width, an input and an
// output matrix (width x 4 width and 4 width x width, as an MLP block), each
// with an fp32 Adam bias.
void bench_step(int width, int layers, int iters, int ns_steps) {
  dmuon_context_t ctx = nullptr;
  dmuon_optimizer_t opt = nullptr;
  check(dmuon_context_create(MPI_COMM_WORLD, "cpu", &ctx), ctx, "context");
  int rank = 0, world = 1;
  dmuon_context_rank(ctx, &rank, &world);
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = 1.0;  // the norm pass and its all-reduce are part of the step
  o.muon_ns_steps = ns_steps;
  check(dmuon_optimizer_create(ctx, &o, &opt), ctx, "optimizer");
  std::vector<std::vector<int64_t>> shapes;
  for (int l = 0; l < layers; ++l) shapes.push_back({width, width});
  shapes.push_back({4 * static_cast<int64_t>(width), width});
  shapes.push_back({width, 4 * static_cast<int64_t>(width)});
  int64_t muon_params = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string w = "w" + std::to_string(i), b = "b" + std::to_string(i);
    check(dmuon_register(opt, w.c_str(), DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, shapes[i].data(), 1, 1, nullptr), ctx, "register");
    check(dmuon_register(opt, b.c_str(), DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, shapes[i].data(), 1, 1, nullptr), ctx, "register");
    muon_params += shapes[i][0] * shapes[i][1];
  }
  check(dmuon_optimizer_finalize(opt), ctx, "finalize");
  int count = 0;
  dmuon_num_params(opt, &count);
  for (int id = 0; id < count; ++id) {
    void *p = nullptr, *g = nullptr;
    int64_t numel = 0;
    dmuon_param_view(opt, id, &p, &g);
    dmuon_param_numel(opt, id, &numel);
    std::vector<float> v(static_cast<std::size_t>(numel));
    fill(v, static_cast<unsigned>(id * 7 + rank + 1));
    std::memcpy(g, v.data(), v.size() * sizeof(float));
    for (float& x : v) x *= 0.1f;
    std::memcpy(p, v.data(), v.size() * sizeof(float));
  }
  std::vector<double> times;
  for (int it = 0; it < iters + 2; ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    check(dmuon_step(opt), ctx, "step");
    double dt = now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= 2) times.push_back(dt);  // two warm-up steps (first touch, workspace)
  }
  std::sort(times.begin(), times.end());

  // The Newton-Schulz share: this rank's owned matrices through the same call
  // the step makes, all ranks at once as in the step; the busiest rank counts.
  double ns_own = 0.0;
  const auto coeffs = ns_coefficients(o.muon_ns_schedule, o.muon_ns_steps);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    int owner = -1;
    check(dmuon_param_owner(opt, static_cast<int>(2 * i), &owner), ctx, "owner");
    if (owner != rank) continue;
    const long k = static_cast<long>(std::min(shapes[i][0], shapes[i][1]));
    const long n = static_cast<long>(std::max(shapes[i][0], shapes[i][1]));
    std::vector<float> input(static_cast<std::size_t>(k * n)), work(cpu_ns_workspace_floats(1, k, n));
    fill(input, 9);
    ns_own += best_of(3, [&] { std::memcpy(work.data(), input.data(), input.size() * sizeof(float)); }, [&] {
      cpu_newton_schulz(work.data(), 1, k, n, coeffs, ns_norm_factor(o.muon_ns_schedule),
                        static_cast<float>(o.muon_ns_eps), kCpuSymmetricProduct, cpu_ns_iteration(k, n));
    });
  }
  MPI_Allreduce(MPI_IN_PLACE, &ns_own, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf("step ranks=%d width=%d layers=%d muon_params=%lld step_ms=%.2f min_ms=%.2f ns_busiest_rank_ms=%.2f\n",
                world, width, layers, static_cast<long long>(muon_params), times[times.size() / 2] * 1e3,
                times.front() * 1e3, ns_own * 1e3);
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  po::options_description desc("bench_newton_schulz: CPU Newton-Schulz vs sgemm, and the optimizer step");
  std::string mode, shapes_s, clock_s;
  int steps = 5, repeats = 7, batch = 1, width = 512, layers = 6, iters = 10;
  desc.add_options()("help", "this text")("mode", po::value(&mode)->default_value("ns"), "ns or step")(
      "shapes", po::value(&shapes_s)->default_value("256x256,512x512,512x2048,1024x1024,2048x512"),
      "NS shapes RxC, comma separated")("ns-steps", po::value(&steps)->default_value(5), "NS iterations (both modes)")(
      "repeats", po::value(&repeats)->default_value(7), "timed repeats per measurement (best is kept)")(
      "batch", po::value(&batch)->default_value(1), "matrices per NS call")(
      "width", po::value(&width)->default_value(512), "step model: hidden width")(
      "layers", po::value(&layers)->default_value(6), "step model: hidden width x width matrices")(
      "iters", po::value(&iters)->default_value(10), "step model: timed steps")(
      "clock", po::value(&clock_s)->default_value("wall"), "ns mode: wall, or cpu (process CPU time; use one BLAS thread)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::printf("%s\n", (std::ostringstream() << desc).str().c_str());
    } else if (mode == "ns") {
      if (clock_s != "wall" && clock_s != "cpu") throw std::runtime_error("--clock must be wall or cpu");
      g_cpu_clock = clock_s == "cpu";
      int world = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &world);
      if (world != 1) throw std::runtime_error("--mode ns runs on one rank");
      bench_ns(parse_shapes(shapes_s), steps, repeats, batch);
    } else if (mode == "step") {
      bench_step(width, layers, iters, steps);
    } else {
      throw std::runtime_error("--mode must be ns or step");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_newton_schulz: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  MPI_Finalize();
  return 0;
}
