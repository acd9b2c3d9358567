/**
 * @file dmuon.h
 * @brief The whole public C ABI of dmuon: sharded Muon and replicated AdamW
 *        across MPI ranks, with HDF5 checkpoints.
 *
 * Usable from C99 and C++. Every call returns an int status (::DMUON_SUCCESS
 * is 0); dmuon_error_string() gives its text and dmuon_context_last_error()
 * the detail of the last failure on a context. The library never exits,
 * aborts or prints on its own.
 */
#ifndef DMUON_DMUON_H
#define DMUON_DMUON_H

#include <stddef.h>
#include <stdint.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @name Version
 *  The header's version; dmuon_check_version() compares it with the library's. */
/**@{*/
#define DMUON_VERSION_MAJOR 0 /**< Major version: bumped on ABI breaks. */
#define DMUON_VERSION_MINOR 1 /**< Minor version: additions. */
#define DMUON_VERSION_PATCH 0 /**< Patch version: fixes. */
/** Compare the header this file was compiled against with the linked library. */
#define DMUON_CHECK_VERSION() \
  dmuon_check_version(DMUON_VERSION_MAJOR, DMUON_VERSION_MINOR, DMUON_VERSION_PATCH)
/**@}*/

/**
 * @brief The status codes, as one list: X(name, value, message).
 *
 * The enum below and the library's message table are both generated from this
 * list, so a code and its text cannot drift apart.
 */
#define DMUON_STATUS_LIST(X)                                                                 \
  X(DMUON_SUCCESS, 0, "success")                                                             \
  X(DMUON_ERR_NULL_HANDLE, 1, "a handle argument is NULL or was destroyed")                 \
  X(DMUON_ERR_NULL_POINTER, 2, "a required pointer argument is NULL")                       \
  X(DMUON_ERR_UNKNOWN_BACKEND, 3, "unknown backend resource string")                        \
  X(DMUON_ERR_BACKEND_NOT_COMPILED, 4, "the requested backend was not compiled into dmuon") \
  X(DMUON_ERR_NO_DEVICE, 5, "no usable GPU device is visible")                              \
  X(DMUON_ERR_INVALID_SHAPE, 6, "invalid shape: a dimension is zero or negative, or the rank is out of range") \
  X(DMUON_ERR_INVALID_DTYPE, 7, "dtype out of range")                                       \
  X(DMUON_ERR_INVALID_KIND, 8, "parameter kind out of range")                               \
  X(DMUON_ERR_INVALID_VALUE, 9, "an argument value is out of range")                        \
  X(DMUON_ERR_MUON_NOT_2D, 10, "a Muon parameter must be a 2-D matrix")                     \
  X(DMUON_ERR_DUPLICATE_NAME, 11, "a parameter of that name is already registered")         \
  X(DMUON_ERR_ALREADY_FINALIZED, 12, "the optimizer is already finalized")                  \
  X(DMUON_ERR_NOT_FINALIZED, 13, "the optimizer is not finalized yet")                      \
  X(DMUON_ERR_NO_PARAMETERS, 14, "no parameter was registered")                             \
  X(DMUON_ERR_REGISTRATION_MISMATCH, 15, "ranks registered different parameter lists")      \
  X(DMUON_ERR_INVALID_PARAM_ID, 16, "parameter id out of range")                            \
  X(DMUON_ERR_OPTIONS_VERSION, 17, "options struct size or version not recognised")         \
  X(DMUON_ERR_OUT_OF_MEMORY, 18, "out of memory")                                           \
  X(DMUON_ERR_MPI, 19, "an MPI call failed")                                                \
  X(DMUON_ERR_CUDA, 20, "a CUDA, cuBLAS or NCCL call failed")                               \
  X(DMUON_ERR_IO, 21, "checkpoint file input/output failed")                                \
  X(DMUON_ERR_CHECKPOINT_CORRUPT, 22, "checkpoint file is damaged or truncated")            \
  X(DMUON_ERR_CHECKPOINT_MISMATCH, 23, "checkpoint belongs to a different model")           \
  X(DMUON_ERR_NOT_FOUND, 24, "no such checkpoint")                                          \
  X(DMUON_ERR_TIMEOUT, 25, "a collective did not complete within the configured timeout")   \
  X(DMUON_ERR_PEER_FAILED, 26, "another rank failed; the collective was abandoned")         \
  X(DMUON_ERR_NOT_SUPPORTED, 27, "operation not supported by this backend or build")        \
  X(DMUON_ERR_INTERNAL, 28, "internal error")                                              \
  X(DMUON_ERR_REPLICAS_DIFFER, 29, "replicated parameters differ across ranks")

/** Status codes returned by every call. */
typedef enum dmuon_status_e {
#define DMUON_X_ENUM(name, value, text) name = value,
  DMUON_STATUS_LIST(DMUON_X_ENUM)
#undef DMUON_X_ENUM
  DMUON_STATUS_COUNT /**< Number of status codes (not a status). */
} dmuon_status_t;

/** Parameter kind: which optimizer updates it. */
typedef enum dmuon_kind_e {
  DMUON_KIND_MUON = 0, /**< 2-D matrix, sharded Muon. */
  DMUON_KIND_ADAM = 1  /**< any shape, replicated AdamW. */
} dmuon_kind_t;

/** Element type of a parameter (and of its gradient). */
typedef enum dmuon_dtype_e {
  DMUON_DTYPE_FP32 = 0, /**< IEEE binary32. */
  DMUON_DTYPE_BF16 = 1  /**< bfloat16 (stored as uint16_t); optimizer state stays fp32. */
} dmuon_dtype_t;

/** Newton-Schulz coefficient schedule. */
typedef enum dmuon_ns_schedule_e {
  DMUON_NS_QUINTIC = 0,       /**< (3.4445, -4.7750, 2.0315) every iteration (Muon's default). */
  DMUON_NS_POLAR_EXPRESS = 1  /**< per-iteration coefficients of Polar Express (Amsel et al., 2025). */
} dmuon_ns_schedule_t;

/** Scaling of the orthogonalised update by the matrix shape (rows x cols). */
typedef enum dmuon_muon_scale_e {
  DMUON_SCALE_ORIGINAL = 0,       /**< sqrt(max(1, rows/cols)). */
  DMUON_SCALE_MATCH_ADAMW_RMS = 1 /**< 0.2 * sqrt(max(rows, cols)). */
} dmuon_muon_scale_t;

/** Opaque context: an MPI communicator plus a backend. */
typedef struct dmuon_context_s *dmuon_context_t;
/** Opaque optimizer: registered parameters, flat storage and state. */
typedef struct dmuon_optimizer_s *dmuon_optimizer_t;

/** Magic number stored in every options struct. */
#define DMUON_OPTIONS_MAGIC 0x646d756fu
/** Version of the options struct layout: 2 added the fields after cuda_stream, 3 added master_weights. */
#define DMUON_OPTIONS_VERSION 3

/** Newton-Schulz products on the CUDA backend (option muon_ns_symmetric). */
#define DMUON_NS_SYMMETRIC_AUTO (-1) /**< timed per shape on the GPU, cross-checked, cached. */
#define DMUON_NS_SYMMETRIC_OFF 0     /**< plain GEMMs always (bitwise the same on every machine). */
#define DMUON_NS_SYMMETRIC_GRAM 1    /**< Gram Newton-Schulz wherever the shape fits it (no timing). */

/**
 * @brief The optimizer options, as one list: O(type, name, default, check, saved, text).
 *
 * The struct ::dmuon_options_t, its initialiser ::DMUON_OPTIONS_INIT, the
 * library's validation, the checkpoint's table of stored hyper-parameters and
 * the Fortran type `dmuon_options` are all generated from this list, so none
 * of them can drift from another. `check` is the rule the library applies:
 * nonneg (finite, >= 0), unit (in [0, 1)), positive (finite, > 0), finite,
 * flag (0 or 1), ns_steps (1..100), ns_schedule (a ::dmuon_ns_schedule_t),
 * muon_scale (a ::dmuon_muon_scale_t), ns_symmetric (AUTO, OFF, GRAM, 2, 4 or 8),
 * nonneg_int (>= 0), any (not checked). `saved`: restored (stored in
 * checkpoints, and restored from them), kept (stored, but a restore keeps the
 * caller's value: it describes the run, not the model), unsaved (not stored).
 * The order is the struct's layout, part of the ABI: new fields go at the end.
 */
#define DMUON_OPTIONS_LIST(O)                                                                          \
  /* Adam group */                                                                                     \
  O(double, adam_lr, 1e-3, nonneg, restored, "AdamW learning rate (default 1e-3).")                    \
  O(double, adam_beta1, 0.9, unit, restored, "AdamW beta1 (default 0.9).")                             \
  O(double, adam_beta2, 0.999, unit, restored, "AdamW beta2 (default 0.999).")                         \
  O(double, adam_eps, 1e-8, positive, restored, "AdamW eps (default 1e-8).")                           \
  O(double, adam_weight_decay, 0.01, nonneg, restored, "AdamW decoupled weight decay (default 0.01).") \
  /* Muon group */                                                                                     \
  O(double, muon_lr, 0.02, nonneg, restored, "Muon learning rate (default 0.02).")                     \
  O(double, muon_momentum, 0.95, unit, restored, "Muon momentum (default 0.95).")                      \
  O(int, muon_nesterov, 1, flag, restored, "1: Nesterov momentum (default), 0: plain.")                \
  O(int, muon_ns_steps, 5, ns_steps, restored, "Newton-Schulz iterations, 1..100 (default 5).")        \
  O(int, muon_ns_schedule, DMUON_NS_QUINTIC, ns_schedule, restored,                                     \
    "a dmuon_ns_schedule_t (default DMUON_NS_QUINTIC).")                                               \
  O(int, muon_scale, DMUON_SCALE_ORIGINAL, muon_scale, restored,                                        \
    "a dmuon_muon_scale_t (default DMUON_SCALE_ORIGINAL).")                                            \
  O(double, muon_ns_eps, 1e-7, positive, restored, "Frobenius normalisation floor (default 1e-7).")    \
  O(double, muon_weight_decay, 0.0, nonneg, restored, "Muon decoupled weight decay (default 0).")      \
  /* Clipping and guards */                                                                            \
  O(double, max_grad_norm, 0.0, finite, restored, "global norm clip threshold; <= 0 disables clipping (default 0).") \
  O(int, skip_nonfinite, 0, flag, restored,                                                             \
    "1: a step whose gradient norm is not finite changes nothing (default 0).")                        \
  /* CUDA backend and the run */                                                                       \
  O(int, cuda_graphs, 1, flag, kept, "1: replay Newton-Schulz from CUDA graphs (default), 0: eager.")  \
  O(int, collective_timeout_ms, 0, nonneg_int, kept,                                                    \
    "a collective not finished after this many ms fails with DMUON_ERR_TIMEOUT; 0 waits forever (default 0).") \
  O(int, cuda_step_graph, 0, flag, kept,                                                                \
    "1: capture the whole step (NCCL included) in one CUDA graph after a warm-up step and replay it (default 0).") \
  O(void *, cuda_stream, NULL, any, unsaved,                                                            \
    "a cudaStream_t to enqueue the step on, which orders it with the caller's work (see dmuon_step()); NULL: the optimizer's own stream, ordered with the legacy default stream by events (default).") \
  /* Version 2 */                                                                                      \
  O(int, muon_ns_symmetric, DMUON_NS_SYMMETRIC_AUTO, ns_symmetric, unsaved,                             \
    "CUDA Newton-Schulz products: DMUON_NS_SYMMETRIC_AUTO (default), DMUON_NS_SYMMETRIC_OFF, DMUON_NS_SYMMETRIC_GRAM, or 2, 4, 8 row blocks where they fit.") \
  O(int, restore_gather, 0, flag, unsaved,                                                              \
    "1: a restore all-gathers the replicated state even when all ranks share a node; 0 (default): there each rank copies it from the page cache.") \
  /* Version 3 */                                                                                      \
  O(int, master_weights, 0, flag, unsaved,                                                              \
    "1: keep an fp32 master copy of every bf16 parameter (Muon: on its owner; Adam: replicated), update it and round it into the bf16 parameter, so that updates below half a bf16 ulp, otherwise lost, add up; a value written into a bf16 view is read by the next step; fixed at dmuon_optimizer_finalize(); checkpoints carry the masters (default 0).")

/**
 * @brief Optimizer-wide options. Always start from ::DMUON_OPTIONS_INIT, then
 *        change the fields you need: fields added later keep old callers valid.
 *        Each field is described in ::DMUON_OPTIONS_LIST.
 */
typedef struct dmuon_options_s {
  size_t struct_size;       /**< sizeof(dmuon_options_t), set by the initialiser. */
  uint32_t magic;           /**< ::DMUON_OPTIONS_MAGIC. */
  uint32_t version;         /**< ::DMUON_OPTIONS_VERSION. */
#define DMUON_X_OPTION_FIELD(type, name, value, check, saved, text) type name;
  DMUON_OPTIONS_LIST(DMUON_X_OPTION_FIELD)
#undef DMUON_X_OPTION_FIELD
} dmuon_options_t;

/** One default of ::DMUON_OPTIONS_LIST, as ::DMUON_OPTIONS_INIT lists them. */
#define DMUON_X_OPTION_DEFAULT(type, name, value, check, saved, text) value,
/** Initialiser holding every default, in the order of ::DMUON_OPTIONS_LIST. */
#define DMUON_OPTIONS_INIT \
  { sizeof(dmuon_options_t), DMUON_OPTIONS_MAGIC, DMUON_OPTIONS_VERSION, DMUON_OPTIONS_LIST(DMUON_X_OPTION_DEFAULT) }

/** Gradient clipping statistics of the last step (read with dmuon_get_clip_stats()). */
typedef struct dmuon_clip_stats_s {
  double total_norm; /**< global L2 norm of the averaged gradient, before clipping. */
  double clip_coef;  /**< min(1, max_norm/(total_norm+1e-6)); 1 when clipping is off. */
  int clipped;       /**< 1 when clip_coef < 1 was applied. */
  int found_inf;     /**< 1 when total_norm was not finite. */
  int step_skipped;  /**< 1 when the step changed nothing because of found_inf. */
} dmuon_clip_stats_t;

/* ------------------------------------------------------------------------- */
/** @name Version and errors */
/**@{*/
/** Run-time library version. Any pointer may be NULL. */
int dmuon_get_version(int *major, int *minor, int *patch);
/** ::DMUON_SUCCESS when the library's major version equals @p major and its minor is at least @p minor. */
int dmuon_check_version(int major, int minor, int patch);
/** Static text of a status code (never NULL; "unknown status" for values out of range). */
const char *dmuon_error_string(int status);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Context */
/**@{*/
/**
 * Create a context on @p comm (duplicated internally) with a backend chosen by
 * @p resource. Collective over @p comm.
 *  - "cpu": host memory, MPI and BLAS.
 *  - "cuda": one GPU per rank, the rank's index on its node (among the ranks of
 *    MPI_COMM_WORLD) modulo the visible devices; that device becomes the
 *    calling thread's current device.
 *  - "cuda:N": device N (each rank may pass its own N); it becomes current.
 *  - "cuda:current": the device the calling thread already has current (the
 *    one the simulation selected with cudaSetDevice or acc_set_device_num);
 *    dmuon does not change it.
 *  - "auto": "cuda" when every rank sees a device, else "cpu".
 * Every call on a "cuda" context runs on the context's device and leaves the
 * caller's current device as it found it. A missing device, an index out of
 * range, or two ranks on one GPU (NCCL needs one rank per GPU; see the
 * backends guide for the test-only opt-in DMUON_CUDA_SHARE_GPU) fail every
 * rank with ::DMUON_ERR_NO_DEVICE.
 */
int dmuon_context_create(MPI_Comm comm, const char *resource, dmuon_context_t *ctx);
/** As dmuon_context_create(), taking a Fortran communicator handle. */
int dmuon_context_create_f(MPI_Fint comm, const char *resource, dmuon_context_t *ctx);
/** Destroy *ctx and set it to NULL; NULL or an already NULL handle is harmless. */
int dmuon_context_destroy(dmuon_context_t *ctx);
/** The name of the backend in use ("cpu" or "cuda") into @p buf of @p len bytes. */
int dmuon_context_backend(dmuon_context_t ctx, char *buf, size_t len);
/** Rank and size of the context's communicator; either pointer may be NULL. */
int dmuon_context_rank(dmuon_context_t ctx, int *rank, int *size);
/**
 * The message of the last failed call on this context (or on an optimizer of
 * it). Valid until the next failing call; "" when none. NULL ctx gives the
 * message of the last failure that had no context.
 */
const char *dmuon_context_last_error(dmuon_context_t ctx);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Optimizer lifetime and registration */
/**@{*/
/** Create an optimizer on @p ctx. @p options may be NULL for the defaults. */
int dmuon_optimizer_create(dmuon_context_t ctx, const dmuon_options_t *options,
                           dmuon_optimizer_t *opt);
/** Destroy *opt and set it to NULL; harmless on NULL. */
int dmuon_optimizer_destroy(dmuon_optimizer_t *opt);
/**
 * Register a parameter. Every rank registers the same list in the same order
 * (checked collectively by dmuon_optimizer_finalize()).
 * @param opt    the optimizer, not yet finalized
 * @param name   unique, at most 255 bytes
 * @param kind   ::dmuon_kind_t; Muon parameters must have ndim == 2
 * @param dtype  ::dmuon_dtype_t
 * @param ndim   1..8
 * @param shape  ndim positive extents, row-major (C order)
 * @param lr_mul multiplier on the group learning rate (1.0 for none)
 * @param wd_mul multiplier on the group weight decay (1.0 for none)
 * @param id     out: the parameter id (0, 1, ... in registration order); may be NULL
 */
int dmuon_register(dmuon_optimizer_t opt, const char *name, int kind, int dtype, int ndim,
                   const int64_t *shape, double lr_mul, double wd_mul, int *id);
/**
 * Finalize the registration (collective): checks that every rank registered the
 * same list, plans the ownership of Muon matrices, allocates the flat storage
 * (zero-filled). On mismatch every rank gets ::DMUON_ERR_REGISTRATION_MISMATCH
 * and the optimizer stays unfinalized.
 */
int dmuon_optimizer_finalize(dmuon_optimizer_t opt);
/** Number of registered parameters. */
int dmuon_num_params(dmuon_optimizer_t opt, int *count);
/** Look a parameter id up by name. */
int dmuon_param_id(dmuon_optimizer_t opt, const char *name, int *id);
/**
 * Pointers into the library's flat storage for parameter @p id: its values and
 * its gradient, contiguous row-major, on the backend's memory (host for "cpu",
 * device for "cuda"). Either out pointer may be NULL. Valid until the
 * optimizer is destroyed or the flat storage moves, which only a
 * dmuon_checkpoint_restore() that must re-plan it does (a checkpoint saved
 * with another ownership plan); dmuon_views_epoch() tells. With the option
 * master_weights, a bf16 value the program writes here is taken by the next
 * step as written (its fp32 master is read again from it); writing the value
 * it already holds leaves the master as it was.
 */
int dmuon_param_view(dmuon_optimizer_t opt, int id, void **data, void **grad);
/**
 * How many times the flat storage has moved since finalize: 0 after
 * dmuon_optimizer_finalize(), one more after each dmuon_checkpoint_restore()
 * that re-planned the storage (ownership saved on another number of ranks, or
 * another plan). Views from dmuon_param_view() stay valid while it reads the
 * same; compare it before and after a restore and take the views again when
 * it grew.
 */
int dmuon_views_epoch(dmuon_optimizer_t opt, int64_t *epoch);
/** Number of elements of parameter @p id. */
int dmuon_param_numel(dmuon_optimizer_t opt, int id, int64_t *numel);
/**
 * Use @p grad (backend memory, same dtype and size) as the gradient source of
 * parameter @p id: each step first copies it into the flat gradient buffer.
 * NULL removes it.
 */
int dmuon_set_external_grad(dmuon_optimizer_t opt, int id, const void *grad);

/**
 * Collective: every parameter (Muon and Adam) takes the values of rank
 * @p root's copy. Call it after initialising the parameters through their
 * views when the ranks may have initialised them differently (a per-rank
 * random seed): Adam parameters are replicated, and a step never makes
 * copies that differ agree again. With the option master_weights the masters
 * of every rank (root's too) are read again from the parameters at the next
 * step, so the replicated ones start equal.
 */
int dmuon_broadcast_params(dmuon_optimizer_t opt, int root);
/**
 * Collective: ::DMUON_ERR_REPLICAS_DIFFER on every rank when some replicated
 * (Adam) parameter holds different values on different ranks; the message
 * names the first such parameter and two ranks that differ. Compares one
 * 64-bit hash per parameter. dmuon_checkpoint_save() runs this check itself
 * before it writes anything.
 */
int dmuon_check_replicas(dmuon_optimizer_t opt);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Stepping and hyper-parameters */
/**@{*/
/**
 * One optimizer step (collective): average the gradients across ranks, clip,
 * update every parameter, publish the Muon matrices to all ranks.
 *
 * On a GPU backend the step only enqueues work and returns; it never waits for
 * the device. Its work is ordered with the caller's stream, by events both
 * ways: it follows everything enqueued earlier on that stream and precedes
 * everything enqueued there afterwards. The caller's stream is
 * dmuon_options_t::cuda_stream when set, else the legacy default stream, which
 * plain cudaMemcpy, kernels launched without a stream, and the per-thread
 * default streams of code built with --default-stream per-thread are all
 * ordered with. So code that writes the gradients with cudaMemcpy, calls
 * dmuon_step and reads the parameters with cudaMemcpy needs no synchronisation
 * of its own. Work on streams created with cudaStreamNonBlocking (OpenACC's
 * async queues among them) is not ordered with the default stream: pass that
 * stream as cuda_stream (for OpenACC, acc_get_cuda_stream(queue)), or call
 * dmuon_synchronize().
 */
int dmuon_step(dmuon_optimizer_t opt);
/**
 * Wait on the host until every piece of work the optimizer enqueued (steps,
 * transfers) has finished. The wait is bounded by collective_timeout_ms when
 * set (::DMUON_ERR_TIMEOUT, or ::DMUON_ERR_PEER_FAILED when a peer died). On
 * the "cpu" backend work is done when a call returns, and this returns at once.
 */
int dmuon_synchronize(dmuon_optimizer_t opt);
/** Parameter @p id has no gradient in the coming step: it is skipped whole (its Adam step count too). */
int dmuon_mark_no_grad(dmuon_optimizer_t opt, int id);
/** Learning rate of a group (::dmuon_kind_t), from the next step on. */
int dmuon_set_lr(dmuon_optimizer_t opt, int kind, double lr);
/** Decoupled weight decay of a group, from the next step on. */
int dmuon_set_weight_decay(dmuon_optimizer_t opt, int kind, double weight_decay);
/** AdamW betas, from the next step on. */
int dmuon_set_betas(dmuon_optimizer_t opt, double beta1, double beta2);
/** AdamW eps, from the next step on. */
int dmuon_set_eps(dmuon_optimizer_t opt, double eps);
/** Muon momentum, from the next step on. */
int dmuon_set_momentum(dmuon_optimizer_t opt, double momentum);
/** Clip threshold (<= 0 disables), from the next step on. */
int dmuon_set_max_grad_norm(dmuon_optimizer_t opt, double max_norm);
/** Current options (as set at creation and by the setters). */
int dmuon_get_options(dmuon_optimizer_t opt, dmuon_options_t *options);
/** Steps taken so far (steps skipped for a non-finite gradient not counted). */
int dmuon_get_step_count(dmuon_optimizer_t opt, int64_t *steps);
/**
 * Clipping statistics of the last step. On a GPU backend this is the one call
 * that waits for the device; call it on your own schedule.
 */
int dmuon_get_clip_stats(dmuon_optimizer_t opt, dmuon_clip_stats_t *stats);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Ownership plan */
/**@{*/
/** Rank that owns (updates) parameter @p id; -1 for Adam parameters (replicated). */
int dmuon_param_owner(dmuon_optimizer_t opt, int id, int *rank);
/** Bytes of optimizer state (Muon momentum, Adam moments, master weights) held on this rank. */
int dmuon_state_bytes(dmuon_optimizer_t opt, int64_t *bytes);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Checkpoints (hdf5_io) */
/**@{*/
/** Options of a checkpoint save. Start from ::DMUON_CHECKPOINT_OPTIONS_INIT. */
typedef struct dmuon_checkpoint_options_s {
  size_t struct_size; /**< sizeof(dmuon_checkpoint_options_t). */
  uint32_t magic;     /**< ::DMUON_OPTIONS_MAGIC. */
  uint32_t version;   /**< ::DMUON_OPTIONS_VERSION. */
  int keep_last;      /**< checkpoints kept in the directory, older ones deleted (default 3; 0 keeps all). */
} dmuon_checkpoint_options_t;
/** Initialiser holding every default. */
#define DMUON_CHECKPOINT_OPTIONS_INIT \
  { sizeof(dmuon_checkpoint_options_t), DMUON_OPTIONS_MAGIC, DMUON_OPTIONS_VERSION, 3 }

/**
 * Save the whole optimizer (collective) into directory @p dir as
 * "ckpt_<user_step>.h5", committed atomically, then point "latest" at it.
 * @p user_step is the caller's step number, stored in the file.
 * @p options may be NULL.
 */
int dmuon_checkpoint_save(dmuon_optimizer_t opt, const char *dir, int64_t user_step,
                          const dmuon_checkpoint_options_t *options);
/**
 * Restore (collective) from @p path: a checkpoint file, or a directory whose
 * "latest" is followed, falling back to the newest older checkpoint that
 * verifies. Writes the restored user step into @p user_step (may be NULL).
 * On any failure the optimizer is unchanged. On success the views from
 * dmuon_param_view() stay valid (same addresses, restored contents) when
 * the checkpoint's plan is the optimizer's; a restore that must re-plan the
 * storage moves it and adds one to dmuon_views_epoch(): take the views again then.
 * The reserved attribute "dmuon.fallback" names the checkpoints passed over
 * (damaged, or a "latest" that names a missing file); "" when none.
 */
int dmuon_checkpoint_restore(dmuon_optimizer_t opt, const char *path, int64_t *user_step);
/** Attach a free-form string attribute saved with the next checkpoints. */
int dmuon_checkpoint_set_attribute(dmuon_optimizer_t opt, const char *key, const char *value);
/** Read a user attribute restored by the last dmuon_checkpoint_restore() into @p buf of @p len bytes. */
int dmuon_checkpoint_get_attribute(dmuon_optimizer_t opt, const char *key, char *buf, size_t len);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Checkpoint requests (signals, wall time) */
/**@{*/
/**
 * Install an async-signal-safe handler for @p signum (for example SIGUSR1)
 * that only sets a flag. The previous handler is kept and restored at destroy.
 */
int dmuon_install_signal_handler(dmuon_context_t ctx, int signum);
/** Set the checkpoint-request flag by hand (safe to call from a signal handler). */
int dmuon_request_checkpoint(dmuon_context_t ctx);
/**
 * Collective: *requested becomes 1 on every rank when any rank's flag is set
 * (by a signal or by dmuon_request_checkpoint()), so all ranks agree on the
 * step at which they checkpoint. Clears the flag.
 */
int dmuon_checkpoint_requested(dmuon_context_t ctx, int *requested);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Gradients and accumulation */
/**@{*/
/**
 * Zero every parameter's gradient view (the library's gradient buffers; arrays
 * given to dmuon_set_external_grad() are the caller's) and start a new
 * accumulation cycle: micro-batches counted so far are dropped. Local, not
 * collective. On a GPU backend it waits for the device's queued work.
 */
int dmuon_zero_grad(dmuon_optimizer_t opt);
/**
 * Accumulate gradients over @p micro_batches calls of dmuon_step() (1, the
 * default, turns accumulation off). The first micro_batches - 1 calls of each
 * cycle only count: nothing is communicated or updated, and the caller adds
 * (+=) each micro-batch's gradient into the gradient views. The last call
 * reduces once and steps with the gradient (sum of the views) / micro_batches,
 * averaged over the ranks: the mean over every rank's micro-batches. That
 * call then zeroes the gradient views, so the next cycle starts from zero.
 * Refused (::DMUON_ERR_INVALID_VALUE) in the middle of a cycle. Every rank
 * sets the same value.
 */
int dmuon_set_grad_accumulation(dmuon_optimizer_t opt, int micro_batches);
/**
 * The accumulation setting and the micro-batches counted in the current cycle
 * (0 right after a step). Either pointer may be NULL.
 */
int dmuon_get_grad_accumulation(dmuon_optimizer_t opt, int *micro_batches, int *pending);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Learning-rate schedules */
/**@{*/
/** Shape of a learning-rate schedule after its (optional) linear warm-up. */
typedef enum dmuon_lr_schedule_kind_e {
  DMUON_LR_CONSTANT = 0,   /**< base_lr. */
  DMUON_LR_LINEAR = 1,     /**< straight from base_lr to final_lr at total_steps. */
  DMUON_LR_COSINE = 2,     /**< half a cosine from base_lr to final_lr at total_steps. */
  DMUON_LR_STEP = 3,       /**< base_lr * gamma^floor(s / step_size). */
  DMUON_LR_POLYNOMIAL = 4  /**< final_lr + (base_lr - final_lr) * (1 - s / d)^power. */
} dmuon_lr_schedule_kind_t;

/**
 * A learning-rate schedule of one group. Start from ::DMUON_LR_SCHEDULE_INIT.
 * At the optimizer's t-th step under the schedule (t = 0, 1, ...), with
 * W = warmup_steps: for t < W the rate is base_lr * (t + 1) / W; after it,
 * with s = t - W and d = total_steps - W, the rate follows @c kind, and stays
 * at final_lr once s >= d (linear, cosine, polynomial).
 */
typedef struct dmuon_lr_schedule_s {
  size_t struct_size;   /**< sizeof(dmuon_lr_schedule_t), set by the initialiser. */
  uint32_t magic;       /**< ::DMUON_OPTIONS_MAGIC. */
  uint32_t version;     /**< ::DMUON_OPTIONS_VERSION. */
  int kind;             /**< a ::dmuon_lr_schedule_kind_t (default ::DMUON_LR_CONSTANT). */
  double base_lr;       /**< the rate reached after warm-up; < 0: the group's rate when the schedule is set (default -1). */
  int64_t warmup_steps; /**< linear warm-up steps, 0 for none (default 0). */
  int64_t total_steps;  /**< linear, cosine, polynomial: the step (warm-up included) where final_lr is reached. */
  double final_lr;      /**< linear, cosine, polynomial: the rate at the end (default 0). */
  double power;         /**< polynomial: the exponent (default 1). */
  int64_t step_size;    /**< step: steps between two decays (default 1). */
  double gamma;         /**< step: the factor of each decay (default 0.1). */
} dmuon_lr_schedule_t;

/** Initialiser holding every default. */
#define DMUON_LR_SCHEDULE_INIT \
  { sizeof(dmuon_lr_schedule_t), DMUON_OPTIONS_MAGIC, DMUON_OPTIONS_VERSION, DMUON_LR_CONSTANT, -1.0, 0, 0, 0.0, 1.0, 1, 0.1 }

/**
 * Give group @p kind (::dmuon_kind_t) a learning-rate schedule, starting at
 * its step 0 with the next dmuon_step(). Each step that updates (the last
 * call of an accumulation cycle) computes the rate on the host from the
 * schedule's step count, into the scalars the step uploads anyway, and
 * advances the count (a step skipped for a non-finite gradient counts too).
 * dmuon_get_options() shows the rate of the last step. dmuon_set_lr() on the
 * group removes its schedule (the set rate holds from then on); so does a
 * NULL @p schedule (the rate stays where the schedule left it). Checkpoints
 * save and restore schedules with their counts. Every rank sets the same.
 */
int dmuon_set_lr_schedule(dmuon_optimizer_t opt, int kind, const dmuon_lr_schedule_t *schedule);
/**
 * The schedule of group @p kind and the steps taken under it (either pointer
 * may be NULL); ::DMUON_ERR_NOT_FOUND when the group has none.
 */
int dmuon_get_lr_schedule(dmuon_optimizer_t opt, int kind, dmuon_lr_schedule_t *schedule, int64_t *steps);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Metrics reduced with the step */
/**@{*/
/** Most values one dmuon_metrics_submit() may carry. */
#define DMUON_MAX_METRICS 32
/** How submitted metrics combine across ranks. */
typedef enum dmuon_metrics_op_e {
  DMUON_METRICS_SUM = 0, /**< the sum over ranks. */
  DMUON_METRICS_MEAN = 1 /**< the sum over ranks divided by their number. */
} dmuon_metrics_op_t;
/**
 * Have the next dmuon_step() that updates (the last call of an accumulation
 * cycle) reduce @p n doubles across ranks with @p op, in the step's own
 * queue: a loss, an error norm, a sample count. @p values is in the
 * backend's memory (host for "cpu", device for "cuda", for example a loss a
 * kernel wrote) and is read by that step, so it must stay valid and unchanged
 * until the step has run (on a GPU: until the step's work has executed).
 * A later submission before the step replaces this one. Every rank submits
 * the same @p n and @p op. n: 1..::DMUON_MAX_METRICS.
 */
int dmuon_metrics_submit(dmuon_optimizer_t opt, int n, const double *values, int op);
/**
 * The metrics reduced by the last step that carried a submission, into
 * @p values (host memory) of @p n <= the number submitted. Like
 * dmuon_get_clip_stats(), on a GPU backend this waits for the device: read
 * them on your own schedule. ::DMUON_ERR_NOT_FOUND before any such step.
 */
int dmuon_metrics_get(dmuon_optimizer_t opt, int n, double *values);
/**@}*/

/* ------------------------------------------------------------------------- */
/** @name Messages */
/**@{*/
/** Level of a message passed to a ::dmuon_message_fn. */
typedef enum dmuon_message_level_e {
  DMUON_MESSAGE_INFO = 0,   /**< something worth knowing (a re-plan of the storage). */
  DMUON_MESSAGE_WARNING = 1 /**< the library chose a slower or older path (a graph capture that fell back
                                 to eager, a restore that fell back to an older checkpoint). */
} dmuon_message_level_t;
/** A message callback: @p text is valid during the call only. */
typedef void (*dmuon_message_fn)(int level, const char *text, void *user_data);
/**
 * Hear the library's messages on this context and its optimizers: @p fn is
 * called on the thread of the dmuon call that has something to say, during
 * that call; it must not call dmuon. NULL @p fn stops the messages (the
 * default: the library never prints).
 */
int dmuon_context_set_message_callback(dmuon_context_t ctx, dmuon_message_fn fn, void *user_data);
/**@}*/

#ifdef __cplusplus
}
#endif

#endif /* DMUON_DMUON_H */
