/* A plain MLP (tanh hidden layers, linear output) whose weights and
 * gradients live in dmuon's storage: forward and backward read the parameter
 * views and write the gradient views, zero copy.
 * Layer l maps dims[l] -> dims[l+1]; weight l is row-major [dims[l+1], dims[l]]
 * (PyTorch's Linear layout, Muon's rows = outputs). */
#ifndef DMUON_EXAMPLE_MLP_H
#define DMUON_EXAMPLE_MLP_H

#include <dmuon/dmuon.h>

#define MLP_MAX_LINEAR 16

typedef struct mlp {
  int n_linear;                  /* hidden layers + 1 */
  int dims[MLP_MAX_LINEAR + 1];  /* n_in, hidden..., 1 */
  int id_w[MLP_MAX_LINEAR], id_b[MLP_MAX_LINEAR];
  float *w[MLP_MAX_LINEAR], *gw[MLP_MAX_LINEAR], *b[MLP_MAX_LINEAR], *gb[MLP_MAX_LINEAR];
  int batch;
  float *act;                    /* activations of every layer, for the backward pass */
  float *delta, *delta_next;     /* back-propagated errors */
} mlp;

/* Registers "layer<l>.weight" and "layer<l>.bias" for each linear map. With
 * use_muon, the hidden-to-hidden weights are Muon matrices and the first and
 * last weights and all biases AdamW; without, everything is AdamW. */
int mlp_register(mlp *m, dmuon_optimizer_t opt, int n_in, int hidden, int layers, int use_muon);
/* After dmuon_optimizer_finalize: takes the views and allocates the workspace. */
int mlp_bind(mlp *m, dmuon_optimizer_t opt, int batch);
/* Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights, zero biases; the same on every rank. */
void mlp_init(mlp *m, int seed);
/* Forward and backward over a batch x[batch][n_in] with targets t[batch]:
 * writes the gradients of the mean squared error into the gradient views and
 * returns the loss. */
double mlp_train_batch(mlp *m, const float *x, const float *t);
void mlp_free(mlp *m);

#endif
