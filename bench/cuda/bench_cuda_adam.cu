// Fused AdamW bandwidth on the ~300-tensor mix, fp32 and bf16 parameters
// (fp32 moments), beside a device-to-device copy in the same run. Bytes
// counted: parameter read+write, gradient read, both moments read+write.
#include "mixes.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int iters = 50;
  if (!bench::parse_iters(argc, argv, "bench_cuda_adam: fused AdamW vs device copy", iters)) {
    MPI_Finalize();
    return 0;
  }
  {
    // Device-to-device copy of 1 GiB: bytes read + written per second.
    const std::size_t bytes = std::size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    bench::cuda(cudaMalloc(&a, bytes), "cudaMalloc");
    bench::cuda(cudaMalloc(&b, bytes), "cudaMalloc");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0);
    for (int i = 0; i < 20; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    bench::result("copy_gbps", 2.0 * bytes * 20 / (ms * 1e-3) / 1e9);
    cudaFree(a);
    cudaFree(b);
  }
  for (int dtype : {DMUON_DTYPE_FP32, DMUON_DTYPE_BF16}) {
    const auto mix = bench::adam_mix(dtype);
    int64_t n = 0;
    for (const auto& p : mix) n += p.numel();
    dmuon_options_t o = DMUON_OPTIONS_INIT;
    bench::Run run(mix, o);
    const double ms = run.ms_per_step(5, iters);
    const double bytes_per = dtype == DMUON_DTYPE_FP32 ? 28.0 : 22.0;
    const std::string tag = dtype == DMUON_DTYPE_FP32 ? "fp32" : "bf16";
    bench::result("adam_tensors", static_cast<double>(mix.size()));
    bench::result("adam_elements", static_cast<double>(n));
    bench::result("adam_" + tag + "_ms", ms);
    bench::result("adam_" + tag + "_gbps", bytes_per * n / (ms * 1e-3) / 1e9);
  }
  MPI_Finalize();
  return 0;
}
