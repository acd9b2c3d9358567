/* Consumer of an installed dmuon: one Muon matrix and one Adam vector, one
 * step on the backend named by argv[1] ("cpu" when none); exits non-zero
 * unless the step ran and changed both. Prints the backend it got. */
#include <dmuon/dmuon.h>
#include <stdio.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    int rc_ = (call);                                                                        \
    if (rc_ != DMUON_SUCCESS) {                                                              \
      fprintf(stderr, "%s: %s: %s\n", #call, dmuon_error_string(rc_), dmuon_context_last_error(ctx)); \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

static int run(const char *resource) {
  dmuon_context_t ctx = NULL;
  dmuon_optimizer_t opt = NULL;
  const int64_t w_shape[2] = {8, 4}, b_shape[1] = {8};
  int w, b, rank, size;
  float *pw, *gw, *pb, *gb;
  int64_t steps = 0;
  CHECK(DMUON_CHECK_VERSION());
  CHECK(dmuon_context_create(MPI_COMM_WORLD, resource, &ctx));
  CHECK(dmuon_context_rank(ctx, &rank, &size));
  CHECK(dmuon_optimizer_create(ctx, NULL, &opt));
  CHECK(dmuon_register(opt, "w", DMUON_KIND_MUON, DMUON_DTYPE_FP32, 2, w_shape, 1.0, 1.0, &w));
  CHECK(dmuon_register(opt, "b", DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, b_shape, 1.0, 0.0, &b));
  CHECK(dmuon_optimizer_finalize(opt));
  CHECK(dmuon_param_view(opt, w, (void **)&pw, (void **)&gw));
  CHECK(dmuon_param_view(opt, b, (void **)&pb, (void **)&gb));
  for (int i = 0; i < 32; ++i) gw[i] = (float)(i % 5) - 2.0f + 0.1f * rank;
  for (int i = 0; i < 8; ++i) gb[i] = 1.0f;
  CHECK(dmuon_step(opt));
  CHECK(dmuon_get_step_count(opt, &steps));
  int changed = 0;
  for (int i = 0; i < 32; ++i) changed += pw[i] != 0.0f;
  const int ok = steps == 1 && changed > 0 && pb[0] < 0.0f;
  char backend[16] = "";
  CHECK(dmuon_context_backend(ctx, backend, sizeof backend));
  if (rank == 0) printf("consumer_c on %d ranks: %s (backend %s)\n", size, ok ? "OK" : "FAILED", backend);
  CHECK(dmuon_optimizer_destroy(&opt));
  CHECK(dmuon_context_destroy(&ctx));
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  const int status = run(argc > 1 ? argv[1] : "cpu");
  MPI_Finalize();
  return status;
}
