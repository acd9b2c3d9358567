/* Wrapper of a C documentation fragment (mode "fragment"): the fragment
 * becomes the body of a block inside doc_fragment(), so it may declare what it
 * likes (its names shadow these). What fragments use without declaring it is
 * declared here, and nothing else: a fragment that needs more must say so. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include <dmuon/dmuon.h>

/* The user's model: writes the local gradient of its parameters. */
static void forward_backward(float *W, float *dW) { (void)W; (void)dW; }

void doc_fragment(dmuon_context_t ctx, dmuon_optimizer_t opt, int w, int b, int rank, int nsteps);
void doc_fragment(dmuon_context_t ctx, dmuon_optimizer_t opt, int w, int b, int rank, int nsteps) {
  (void)ctx; (void)opt; (void)w; (void)b; (void)rank; (void)nsteps; (void)forward_backward;
  {
@SNIPPET@
  }
}

int main(void) { return 0; }
