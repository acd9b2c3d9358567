#include "mlp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

#ifdef DMUON_EXAMPLE_CUDA
#include <cuda_runtime.h>
/* Host <-> device copy of a mirror (unified addressing tells the direction). */
static int copy_bytes(void *dst, const void *src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) == cudaSuccess ? DMUON_SUCCESS : DMUON_ERR_CUDA;
}
#else
static int copy_bytes(void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  return DMUON_SUCCESS;
}
#endif

int mlp_register(mlp *m, dmuon_optimizer_t opt, int n_in, int hidden, int layers, int use_muon) {
  if (layers < 1 || layers + 1 > MLP_MAX_LINEAR) return DMUON_ERR_INVALID_VALUE;
  m->n_linear = layers + 1;
  m->dims[0] = n_in;
  for (int l = 1; l <= layers; ++l) m->dims[l] = hidden;
  m->dims[layers + 1] = 1;
  for (int l = 0; l < m->n_linear; ++l) {
    char name[64];
    const int64_t w_shape[2] = {m->dims[l + 1], m->dims[l]}, b_shape[1] = {m->dims[l + 1]};
    /* Muon is for the hidden matrices; the input and output layers are not
     * matrices in Muon's sense (one side is the data), so they stay AdamW. */
    const int hidden_matrix = l > 0 && l < m->n_linear - 1;
    const int kind = use_muon && hidden_matrix ? DMUON_KIND_MUON : DMUON_KIND_ADAM;
    snprintf(name, sizeof name, "layer%d.weight", l);
    int rc = dmuon_register(opt, name, kind, DMUON_DTYPE_FP32, 2, w_shape, 1.0, 1.0, &m->id_w[l]);
    if (rc != DMUON_SUCCESS) return rc;
    snprintf(name, sizeof name, "layer%d.bias", l);
    /* no weight decay on biases */
    rc = dmuon_register(opt, name, DMUON_KIND_ADAM, DMUON_DTYPE_FP32, 1, b_shape, 1.0, 0.0, &m->id_b[l]);
    if (rc != DMUON_SUCCESS) return rc;
  }
  return DMUON_SUCCESS;
}

int mlp_bind(mlp *m, dmuon_optimizer_t opt, int batch, int on_device) {
  int width = 0, total = 0;
  m->mirrored = on_device;
  for (int l = 0; l < m->n_linear; ++l) {
    int rc = dmuon_param_view(opt, m->id_w[l], (void **)&m->view_w[l], (void **)&m->view_gw[l]);
    if (rc == DMUON_SUCCESS) rc = dmuon_param_view(opt, m->id_b[l], (void **)&m->view_b[l], (void **)&m->view_gb[l]);
    if (rc != DMUON_SUCCESS) return rc;
    const size_t nw = (size_t)m->dims[l] * (size_t)m->dims[l + 1], nb = (size_t)m->dims[l + 1];
    if (on_device) {
      m->w[l] = malloc(sizeof(float) * nw);
      m->gw[l] = malloc(sizeof(float) * nw);
      m->b[l] = malloc(sizeof(float) * nb);
      m->gb[l] = malloc(sizeof(float) * nb);
      if (!m->w[l] || !m->gw[l] || !m->b[l] || !m->gb[l]) return DMUON_ERR_OUT_OF_MEMORY;
    } else {
      m->w[l] = m->view_w[l];
      m->gw[l] = m->view_gw[l];
      m->b[l] = m->view_b[l];
      m->gb[l] = m->view_gb[l];
    }
  }
  for (int l = 0; l <= m->n_linear; ++l) {
    total += m->dims[l];
    if (m->dims[l] > width) width = m->dims[l];
  }
  m->batch = batch;
  m->act = malloc(sizeof(float) * (size_t)batch * (size_t)total);
  m->delta = malloc(sizeof(float) * (size_t)batch * (size_t)width);
  m->delta_next = malloc(sizeof(float) * (size_t)batch * (size_t)width);
  return m->act && m->delta && m->delta_next ? DMUON_SUCCESS : DMUON_ERR_OUT_OF_MEMORY;
}

int mlp_init(mlp *m, int seed) {
  for (int l = 0; l < m->n_linear; ++l) {
    const int n_out = m->dims[l + 1], n_in = m->dims[l];
    const double bound = 1.0 / sqrt((double)n_in);
    int64_t s = rng_seed(seed, 1, l);
    for (int i = 0; i < n_out * n_in; ++i) m->w[l][i] = (float)((2.0 * rng_uniform(&s) - 1.0) * bound);
    for (int o = 0; o < n_out; ++o) m->b[l][o] = 0.0f;
    if (m->mirrored) {
      int rc = copy_bytes(m->view_w[l], m->w[l], sizeof(float) * (size_t)(n_out * n_in));
      if (rc == DMUON_SUCCESS) rc = copy_bytes(m->view_b[l], m->b[l], sizeof(float) * (size_t)n_out);
      if (rc != DMUON_SUCCESS) return rc;
    }
  }
  return DMUON_SUCCESS;
}

int mlp_pull_params(mlp *m) {
  if (!m->mirrored) return DMUON_SUCCESS;
  int rc = DMUON_SUCCESS;
  for (int l = 0; l < m->n_linear && rc == DMUON_SUCCESS; ++l) {
    rc = copy_bytes(m->w[l], m->view_w[l], sizeof(float) * (size_t)(m->dims[l] * m->dims[l + 1]));
    if (rc == DMUON_SUCCESS) rc = copy_bytes(m->b[l], m->view_b[l], sizeof(float) * (size_t)m->dims[l + 1]);
  }
  return rc;
}

int mlp_push_grads(mlp *m) {
  int rc = DMUON_SUCCESS;
  for (int l = 0; l < m->n_linear && m->mirrored && rc == DMUON_SUCCESS; ++l) {
    rc = copy_bytes(m->view_gw[l], m->gw[l], sizeof(float) * (size_t)(m->dims[l] * m->dims[l + 1]));
    if (rc == DMUON_SUCCESS) rc = copy_bytes(m->view_gb[l], m->gb[l], sizeof(float) * (size_t)m->dims[l + 1]);
  }
  return rc;
}

/* Start of layer l's activations [batch][dims[l]] in the workspace. */
static float *activations(mlp *m, int l) {
  size_t off = 0;
  for (int k = 0; k < l; ++k) off += (size_t)m->batch * (size_t)m->dims[k];
  return m->act + off;
}

double mlp_train_batch(mlp *m, const float *x, const float *t) {
  const int B = m->batch, L = m->n_linear;
  float *a0 = activations(m, 0);
  for (int i = 0; i < B * m->dims[0]; ++i) a0[i] = x[i];
  /* forward: a[l+1] = act(W_l a[l] + b_l), tanh except after the last layer */
  for (int l = 0; l < L; ++l) {
    const int n_in = m->dims[l], n_out = m->dims[l + 1];
    const float *in = activations(m, l);
    float *out = activations(m, l + 1);
    for (int s = 0; s < B; ++s)
      for (int o = 0; o < n_out; ++o) {
        float z = m->b[l][o];
        for (int i = 0; i < n_in; ++i) z += m->w[l][o * n_in + i] * in[s * n_in + i];
        out[s * n_out + o] = l < L - 1 ? tanhf(z) : z;
      }
  }
  /* loss = mean over the batch of (y - t)^2; delta = dloss/dz of the last layer */
  const float *y = activations(m, L);
  double loss = 0;
  for (int s = 0; s < B; ++s) {
    const double e = (double)y[s] - t[s];
    loss += e * e;
    m->delta[s] = (float)(2.0 * e / B);
  }
  /* backward: gradients written (not accumulated) into dmuon's views; loops
   * ordered so that the innermost runs along contiguous memory */
  for (int l = L - 1; l >= 0; --l) {
    const int n_in = m->dims[l], n_out = m->dims[l + 1];
    const float *in = activations(m, l);
    for (int o = 0; o < n_out; ++o) m->gb[l][o] = 0.0f;
    for (int i = 0; i < n_out * n_in; ++i) m->gw[l][i] = 0.0f;
    for (int s = 0; s < B; ++s)
      for (int o = 0; o < n_out; ++o) {
        const float d = m->delta[s * n_out + o];
        m->gb[l][o] += d;
        for (int i = 0; i < n_in; ++i) m->gw[l][o * n_in + i] += d * in[s * n_in + i];
      }
    if (l == 0) break;
    /* through W_l, then the tanh that produced `in`: times (1 - a^2) */
    for (int s = 0; s < B; ++s) {
      float *next = m->delta_next + s * n_in;
      for (int i = 0; i < n_in; ++i) next[i] = 0.0f;
      for (int o = 0; o < n_out; ++o) {
        const float d = m->delta[s * n_out + o];
        for (int i = 0; i < n_in; ++i) next[i] += m->w[l][o * n_in + i] * d;
      }
      for (int i = 0; i < n_in; ++i) next[i] *= 1.0f - in[s * n_in + i] * in[s * n_in + i];
    }
    float *swap = m->delta;
    m->delta = m->delta_next;
    m->delta_next = swap;
  }
  return loss / B;
}

void mlp_free(mlp *m) {
  for (int l = 0; l < m->n_linear && m->mirrored; ++l) {
    free(m->w[l]);
    free(m->gw[l]);
    free(m->b[l]);
    free(m->gb[l]);
    m->w[l] = m->gw[l] = m->b[l] = m->gb[l] = NULL;
  }
  free(m->act);
  free(m->delta);
  free(m->delta_next);
  m->act = m->delta = m->delta_next = NULL;
}
