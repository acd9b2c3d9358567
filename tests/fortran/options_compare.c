/* For test_f_contracts.F90: where the Fortran type dmuon_options, with its
 * defaults, differs from the C library's DMUON_OPTIONS_INIT. Field by field
 * through DMUON_OPTIONS_LIST, so a field at another offset differs too. */
#include <stdio.h>
#include <string.h>

#include "dmuon/dmuon.h"

/* -1: the same; -2: struct_size, magic or version differ; else the 0-based
 * position in DMUON_OPTIONS_LIST of the first option that differs. */
int dmuon_test_options_differ(const dmuon_options_t *f) {
  const dmuon_options_t c = DMUON_OPTIONS_INIT;
  int i = 0;
  if (f->struct_size != c.struct_size || f->magic != c.magic || f->version != c.version) return -2;
#define DMUON_X_COMPARE(type, name, value, check, saved, text)      \
  if (memcmp(&f->name, &c.name, sizeof c.name) != 0) {               \
    fprintf(stderr, "the Fortran default of option %s differs\n", #name); \
    return i;                                                        \
  }                                                                  \
  ++i;
  DMUON_OPTIONS_LIST(DMUON_X_COMPARE)
#undef DMUON_X_COMPARE
  return -1;
}
