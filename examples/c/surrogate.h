/* The Burgers surrogate example: a 1-D Burgers simulation split over the MPI
 * ranks produces training pairs as it runs, and an MLP learns the solver's
 * time derivative online, its optimizer steps taken by dmuon.
 * driver.cpp fills a surrogate_config from surrogate.cfg and the command
 * line; surrogate_run() is the scientist's loop. */
#ifndef DMUON_EXAMPLE_SURROGATE_H
#define DMUON_EXAMPLE_SURROGATE_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One field per key of examples/surrogate.cfg (same names). */
typedef struct surrogate_config {
  int nx;
  double viscosity;
  int horizon;
  int episode;
  double target_scale;
  int stencil;
  int hidden;
  int layers;
  int batch;
  char optimizer[16];
  double muon_lr;
  double adam_lr;
  double lr_final;
  double weight_decay;
  double max_grad_norm;
  char backend[32];
  int steps;
  int seed;
  int log_every;
  char loss_csv[1024];
  int checkpoint_every;
  char checkpoint_dir[1024];
  int restart;
} surrogate_config;

/* Runs the example on comm (collective), cfg checked already (driver.cpp).
 * Returns 0 when every step is done (the last one checkpointed),
 * EX_TEMPFAIL (75) after a checkpoint requested by a signal (run it again to
 * continue), 2 when --nx is too small for the rank count, anything else
 * after a failure (already reported on stderr). */
int surrogate_run(const surrogate_config *cfg, MPI_Comm comm);

#ifdef __cplusplus
}
#endif

#endif
