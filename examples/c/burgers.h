/* 1-D viscous Burgers, u_t + (u^2/2)_x = nu u_xx on [0, 2 pi), periodic:
 * Rusanov flux, central diffusion, forward Euler; the grid is split into
 * contiguous blocks, one per rank, with halos exchanged around the ring. */
#ifndef DMUON_EXAMPLE_BURGERS_H
#define DMUON_EXAMPLE_BURGERS_H

#include <mpi.h>
#include <stdint.h>

typedef struct burgers {
  MPI_Comm comm;
  int left, right;     /* neighbour ranks on the periodic ring */
  int n_local, offset; /* this rank's points and the global index of the first */
  int halo;            /* ghost points on each side */
  double dx, dt, nu;
  double *u;           /* n_local + 2 halo values; u[halo + i] is local point i */
  double *next;        /* scratch of the same size */
} burgers;

/* 0 on success; halo >= 1, and every rank needs at least halo points. */
int burgers_init(burgers *b, MPI_Comm comm, int nx, double nu, int halo);
void burgers_free(burgers *b);
/* A random sum of four sine modes, the same function on every rank. */
void burgers_set_initial(burgers *b, int seed, int episode);
/* Fills the halos from the neighbours. */
int burgers_exchange(burgers *b);
/* Advances nsteps solver steps (halos are exchanged before each). */
int burgers_advance(burgers *b, int nsteps);

#endif
