/* A plain MLP (tanh hidden layers, linear output) whose weights and
 * gradients live in dmuon's storage: on the cpu backend, forward and backward
 * read the parameter views and write the gradient views, zero copy. On the
 * cuda backend the views are device memory and this host code works on host
 * mirrors: mlp_pull_params before the forward pass, mlp_push_grads after the
 * backward pass (a real GPU code would run its kernels on the views).
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
  /* dmuon's views; the same as w, gw, b, gb unless mirrored */
  float *view_w[MLP_MAX_LINEAR], *view_gw[MLP_MAX_LINEAR], *view_b[MLP_MAX_LINEAR], *view_gb[MLP_MAX_LINEAR];
  int mirrored;                  /* 1: the views are device memory */
  int batch;
  float *act;                    /* activations of every layer, for the backward pass */
  float *delta, *delta_next;     /* back-propagated errors */
} mlp;

/* Registers "layer<l>.weight" and "layer<l>.bias" for each linear map. With
 * use_muon, the hidden-to-hidden weights are Muon matrices and the first and
 * last weights and all biases AdamW; without, everything is AdamW. */
int mlp_register(mlp *m, dmuon_optimizer_t opt, int n_in, int hidden, int layers, int use_muon);
/* After dmuon_optimizer_finalize and after dmuon_checkpoint_restore (a
 * restore may move dmuon's storage): takes the views (on_device: the backend
 * keeps them in device memory) and allocates the workspace. Call it once. */
int mlp_bind(mlp *m, dmuon_optimizer_t opt, int batch, int on_device);
/* Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights, zero biases; the same on
 * every rank. Writes dmuon's parameters. */
int mlp_init(mlp *m, int seed);
/* Mirrored only: copy the parameters to the host. A plain cudaMemcpy is
 * ordered after the last dmuon_step: no synchronisation is needed. */
int mlp_pull_params(mlp *m);
/* Mirrored only: copy the gradients to dmuon's device views. */
int mlp_push_grads(mlp *m);
/* Forward and backward over a batch x[batch][n_in] with targets t[batch]:
 * writes the gradients of the mean squared error into the gradient views and
 * returns the loss. */
double mlp_train_batch(mlp *m, const float *x, const float *t);
void mlp_free(mlp *m);

#endif
