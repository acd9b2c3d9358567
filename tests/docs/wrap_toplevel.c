/* Wrapper of a C documentation fragment of mode "toplevel": declarations and
 * functions at file scope. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include <dmuon/dmuon.h>

@SNIPPET@

int main(void) { return 0; }
