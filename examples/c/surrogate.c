/* The scientist's loop: simulate, harvest training pairs, train the
 * surrogate with dmuon, log, checkpoint, restart. */
#include "surrogate.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sysexits.h>

#include <dmuon/dmuon.h>

#include "burgers.h"
#include "mlp.h"
#include "rng.h"

/* Report a failed dmuon call (every rank that sees it) and leave. */
#define CHECK(call)                                                                                         \
  do {                                                                                                      \
    const int rc_ = (call);                                                                                 \
    if (rc_ != DMUON_SUCCESS) {                                                                             \
      fprintf(stderr, "%s failed: %s: %s\n", #call, dmuon_error_string(rc_), dmuon_context_last_error(ctx)); \
      goto done;                                                                                            \
    }                                                                                                       \
  } while (0)

/* After a collective call that failed on some rank: when it failed on every
 * rank the ranks share the cause (a bad --backend, an unreadable checkpoint),
 * so rank 0 alone says it; else each failing rank says what it saw. Returns
 * 1 when any rank failed, so that all of them leave together. */
static int failed_anywhere(MPI_Comm comm, int rc, dmuon_context_t ctx, const char *what) {
  int rank = 0, mine = rc != DMUON_SUCCESS, count = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Allreduce(&mine, &count, 1, MPI_INT, MPI_SUM, comm);
  if (mine && (count < size || rank == 0))
    fprintf(stderr, "burgers_surrogate_c: %s%s: %s: %s\n", count < size ? "this rank: " : "", what,
            dmuon_error_string(rc), dmuon_context_last_error(ctx));
  return count > 0;
}

/* Training pairs of this rank, around random local points i at the current
 * time: the input is u_i and the differences (u_{i+j} - u_i)/dx for
 * 0 < |j| <= stencil (O(1) features: raw neighbouring values differ by
 * O(dx), which a network resolves badly); the target is target_scale times
 * the solver's du/dt at i over the next `horizon` steps. Advances the
 * simulation by `horizon` steps. */
static int harvest_pairs(burgers *sim, const surrogate_config *cfg, int rank, int step, float *x, float *t) {
  const int width = 2 * cfg->stencil + 1, n = sim->n_local + 2 * sim->halo;
  double *before = malloc(sizeof(double) * (size_t)n);
  int64_t s = rng_seed(cfg->seed, 2 + rank, step);
  int *points = malloc(sizeof(int) * (size_t)cfg->batch);
  if (!before || !points || burgers_exchange(sim)) return 1;
  memcpy(before, sim->u, sizeof(double) * (size_t)n);
  for (int k = 0; k < cfg->batch; ++k) {
    points[k] = (int)(rng_uniform(&s) * sim->n_local);
    const double *centre = before + sim->halo + points[k];
    for (int j = -cfg->stencil; j <= cfg->stencil; ++j)
      x[k * width + j + cfg->stencil] = (float)(j == 0 ? centre[0] : (centre[j] - centre[0]) / sim->dx);
  }
  const int rc = burgers_advance(sim, cfg->horizon);
  for (int k = 0; k < cfg->batch; ++k) {
    const int i = sim->halo + points[k];
    t[k] = (float)(cfg->target_scale * (sim->u[i] - before[i]) / (cfg->horizon * sim->dt));
  }
  free(before);
  free(points);
  return rc;
}

/* Puts the simulation where it was before training step `step`: the data
 * depend only on the step, so a restarted run sees what the first run saw. */
static int replay_simulation(burgers *sim, const surrogate_config *cfg, int step) {
  burgers_set_initial(sim, cfg->seed, step / cfg->episode);
  return burgers_advance(sim, (step % cfg->episode) * cfg->horizon);
}

static void make_dir(const char *dir) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) perror(dir);
}

int surrogate_run(const surrogate_config *cfg, MPI_Comm comm) {
  int rank = 0, size = 1, status = 1, start = 0, checkpointed_on_request = 0;
  const int use_muon = strcmp(cfg->optimizer, "muon") == 0;
  dmuon_context_t ctx = NULL;
  dmuon_optimizer_t opt = NULL;
  burgers sim;
  mlp net = {0};
  float *x = NULL, *t = NULL;
  FILE *csv = NULL;
  memset(&sim, 0, sizeof sim);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  /* driver.cpp checked every value alone; this one depends on the rank count. */
  if (burgers_init(&sim, comm, cfg->nx, cfg->viscosity, cfg->stencil > 1 ? cfg->stencil : 1)) {
    if (rank == 0)
      fprintf(stderr, "burgers_surrogate_c: --nx=%d: too small for %d ranks with --stencil=%d (each rank needs %d points)\n",
              cfg->nx, size, cfg->stencil, cfg->stencil > 1 ? cfg->stencil : 1);
    burgers_free(&sim);
    return 2;
  }

  /* A fresh start must not meet an earlier run's checkpoints: dmuon never
   * overwrites a checkpoint, so its saves would fail, the last one at the
   * end of the run. Rank 0 looks (`latest` names the newest checkpoint). */
  int stale = 0;
  if (!cfg->restart && rank == 0) {
    char latest[1100];
    struct stat st;
    snprintf(latest, sizeof latest, "%s/latest", cfg->checkpoint_dir);
    stale = stat(latest, &st) == 0;
  }
  MPI_Bcast(&stale, 1, MPI_INT, 0, comm);
  if (stale) {
    if (rank == 0)
      fprintf(stderr, "burgers_surrogate_c: --restart=0 but --checkpoint_dir=%s holds an earlier run's checkpoints: "
              "remove them, choose another directory, or --restart=1 to continue\n", cfg->checkpoint_dir);
    burgers_free(&sim);
    return 2;
  }

  char option[64];
  snprintf(option, sizeof option, "--backend=%s", cfg->backend);
  if (failed_anywhere(comm, dmuon_context_create(comm, cfg->backend, &ctx), ctx, option)) {
    status = 2; /* a backend this build or this machine cannot give */
    goto done;
  }
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.muon_lr = cfg->muon_lr;
  o.adam_lr = cfg->adam_lr;
  o.muon_weight_decay = o.adam_weight_decay = cfg->weight_decay;
  o.max_grad_norm = cfg->max_grad_norm;
  CHECK(dmuon_optimizer_create(ctx, &o, &opt));
  CHECK(mlp_register(&net, opt, 2 * cfg->stencil + 1, cfg->hidden, cfg->layers, use_muon));
  CHECK(dmuon_optimizer_finalize(opt));
  int restored = 0;
  if (cfg->restart) {
    int64_t user_step = 0;
    const int rc = dmuon_checkpoint_restore(opt, cfg->checkpoint_dir, &user_step);
    if (rc == DMUON_SUCCESS) {
      restored = 1;
      start = (int)user_step;
      if (rank == 0) printf("restored %s at step %d\n", cfg->checkpoint_dir, start);
    } else if (failed_anywhere(comm, rc == DMUON_ERR_NOT_FOUND ? DMUON_SUCCESS : rc, ctx, "--checkpoint_dir")) {
      goto done;
    }
  }
  /* Take the views after the restore: a restore may re-plan dmuon's storage,
   * and views taken before it would then point to freed memory. */
  char backend[16] = "?";
  CHECK(dmuon_context_backend(ctx, backend, sizeof backend));
  CHECK(mlp_bind(&net, opt, cfg->batch, strcmp(backend, "cuda") == 0));
  if (!restored) CHECK(mlp_init(&net, cfg->seed));
  /* SIGUSR1 (sent by SLURM before the time limit) asks for checkpoint-and-exit. */
  CHECK(dmuon_install_signal_handler(ctx, SIGUSR1));
  CHECK(dmuon_install_signal_handler(ctx, SIGTERM));

  if (replay_simulation(&sim, cfg, start)) goto done;
  CHECK(dmuon_checkpoint_set_attribute(opt, "example", "burgers_surrogate"));
  CHECK(dmuon_checkpoint_set_attribute(opt, "optimizer", cfg->optimizer));
  if (rank == 0) {
    make_dir(cfg->checkpoint_dir);
    csv = fopen(cfg->loss_csv, start > 0 ? "a" : "w");
    if (!csv) perror(cfg->loss_csv);
    else if (start == 0) fprintf(csv, "step,loss,seconds\n");
    printf("burgers surrogate: %d ranks, backend %s, optimizer %s, nx %d, MLP %d-%dx%d-1, batch %d per rank\n",
           size, backend, use_muon ? "muon+adam" : "adam", cfg->nx, 2 * cfg->stencil + 1, cfg->layers,
           cfg->hidden, cfg->batch);
  }

  const int width = 2 * cfg->stencil + 1;
  x = malloc(sizeof(float) * (size_t)cfg->batch * (size_t)width);
  t = malloc(sizeof(float) * (size_t)cfg->batch);
  if (!x || !t) goto done;
  /* Logged: the relative loss, mean squared error over mean squared target,
   * over the last log_every steps and all ranks. Episodes differ in
   * amplitude; relative to it, their losses compare. */
  double loss_sum[2] = {0, 0}, t0 = MPI_Wtime(), t_log = t0;
  int since_log = 0;
  for (int step = start; step < cfg->steps; ++step) {
    if (step > start && step % cfg->episode == 0) burgers_set_initial(&sim, cfg->seed, step / cfg->episode);
    if (harvest_pairs(&sim, cfg, rank, step, x, t)) goto done;
    /* Linear decay: a setter call between steps, nothing re-planned. */
    const double lr_factor = 1.0 - (1.0 - cfg->lr_final) * step / cfg->steps;
    CHECK(dmuon_set_lr(opt, DMUON_KIND_MUON, cfg->muon_lr * lr_factor));
    CHECK(dmuon_set_lr(opt, DMUON_KIND_ADAM, cfg->adam_lr * lr_factor));
    CHECK(mlp_pull_params(&net));
    loss_sum[0] += mlp_train_batch(&net, x, t);
    CHECK(mlp_push_grads(&net));
    for (int k = 0; k < cfg->batch; ++k) loss_sum[1] += (double)t[k] * t[k] / cfg->batch;
    ++since_log;
    CHECK(dmuon_step(opt));
    const int done_steps = step + 1;

    if (done_steps % cfg->log_every == 0 || done_steps == cfg->steps) {
      double global[2] = {0, 0};
      MPI_Allreduce(loss_sum, global, 2, MPI_DOUBLE, MPI_SUM, comm);
      const double relative = global[0] / global[1];
      const double now = MPI_Wtime();
      if (rank == 0) {
        printf("step %6d  loss %.4e  steps/s %8.1f\n", done_steps, relative, since_log / (now - t_log));
        fflush(stdout);
        if (csv) {
          fprintf(csv, "%d,%.6e,%.3f\n", done_steps, relative, now - t0);
          fflush(csv);  /* a run killed by the scheduler keeps its curve */
        }
      }
      loss_sum[0] = loss_sum[1] = 0;
      since_log = 0;
      t_log = now;
    }
    int requested = 0;
    CHECK(dmuon_checkpoint_requested(ctx, &requested));
    if (requested || (cfg->checkpoint_every > 0 && done_steps % cfg->checkpoint_every == 0)) {
      CHECK(dmuon_checkpoint_save(opt, cfg->checkpoint_dir, done_steps, NULL));
      if (rank == 0) printf("checkpoint at step %d in %s\n", done_steps, cfg->checkpoint_dir);
      if (requested) {
        if (rank == 0) printf("checkpoint requested by a signal: exiting; rerun to continue\n");
        checkpointed_on_request = 1;
        break;
      }
    }
  }
  /* The end of the run is checkpointed too, when the last step was not: a
   * longer run started later (a larger --steps) continues from here. */
  if (!checkpointed_on_request && start < cfg->steps && !(cfg->checkpoint_every > 0 && cfg->steps % cfg->checkpoint_every == 0)) {
    CHECK(dmuon_checkpoint_save(opt, cfg->checkpoint_dir, cfg->steps, NULL));
    if (rank == 0) printf("checkpoint at step %d in %s\n", cfg->steps, cfg->checkpoint_dir);
  }
  /* EX_TEMPFAIL (75): checkpointed on request, run again to continue. The job
     scripts requeue on it whoever sent the signal (jobscripts/lib/dmuon_job.sh). */
  status = checkpointed_on_request ? EX_TEMPFAIL : 0;
done:
  if (csv) fclose(csv);
  free(x);
  free(t);
  mlp_free(&net);
  burgers_free(&sim);
  dmuon_optimizer_destroy(&opt);
  dmuon_context_destroy(&ctx);
  return status;
}
