/* Park-Miller "minimal standard" generator. It is exact in 64-bit integer
 * arithmetic, so the Fortran example reproduces the same streams (same
 * initial weights, same initial conditions, same samples). */
#ifndef DMUON_EXAMPLE_RNG_H
#define DMUON_EXAMPLE_RNG_H

#include <stdint.h>

/* A stream seeded from three small non-negative integers. */
static inline int64_t rng_seed(int64_t a, int64_t b, int64_t c) {
  int64_t s = (a * 1000003 + b * 7919 + c * 104729) % 2147483646 + 1;
  for (int i = 0; i < 3; ++i) s = (s * 16807) % 2147483647;
  return s;
}

/* Uniform in (0, 1). */
static inline double rng_uniform(int64_t *s) {
  *s = (*s * 16807) % 2147483647;
  return (double)*s / 2147483647.0;
}

#endif
