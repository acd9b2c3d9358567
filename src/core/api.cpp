// The C ABI of include/dmuon/dmuon.h (context, optimizer, step, queries).
// Each function checks its handles and pointers, then delegates.
#include <algorithm>
#include <cstring>
#include <utility>

#include "core/api_guard.hpp"
#include "core/replicas.hpp"

using namespace dmuon;

namespace dmuon {
std::string& orphan_last_error() {
  static thread_local std::string message;
  return message;
}

int release_context(dmuon_context_s* ctx) noexcept {
  dmuon_context_s& c = *ctx;
  if (--c.references > 0) return DMUON_SUCCESS;
  const int status = guarded(&c, [&] {
    ScopedDevice on_device(c.backend.get());
    if (!c.backend->failed_status()) c.backend->close();
  });
  const bool poisoned = c.backend->failed_status() != 0;
  if (status != DMUON_SUCCESS) orphan_last_error() = c.last_error;  // the context's message dies with it
  for (auto it = c.saved_handlers.rbegin(); it != c.saved_handlers.rend(); ++it)
    sigaction(it->signum, &it->previous, nullptr);
  c.backend.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  // MPI_Comm_free is collective in the standard, and a poisoned communicator
  // holds an abandoned operation with a rank that may be dead: leave it to
  // MPI (the handle is dropped, the process should end soon).
  if (!finalized && !poisoned) MPI_Comm_free(&c.comm);
  c.magic = kDeadMagic;
  delete &c;
  return status;
}
}  // namespace dmuon

extern "C" {

int dmuon_get_version(int* major, int* minor, int* patch) {
  if (major) *major = DMUON_VERSION_MAJOR;
  if (minor) *minor = DMUON_VERSION_MINOR;
  if (patch) *patch = DMUON_VERSION_PATCH;
  return DMUON_SUCCESS;
}

int dmuon_check_version(int major, int minor, int patch) {
  (void)patch;
  if (major == DMUON_VERSION_MAJOR && minor <= DMUON_VERSION_MINOR) return DMUON_SUCCESS;
  record_error(nullptr, "dmuon header " + std::to_string(major) + "." + std::to_string(minor) +
                            " does not match library " + std::to_string(DMUON_VERSION_MAJOR) + "." +
                            std::to_string(DMUON_VERSION_MINOR));
  return DMUON_ERR_NOT_SUPPORTED;
}

const char* dmuon_error_string(int status) {
  switch (status) {
#define DMUON_X_CASE(name, value, text) \
  case value:                           \
    return text;
    DMUON_STATUS_LIST(DMUON_X_CASE)
#undef DMUON_X_CASE
    default:
      return "unknown status";
  }
}

int dmuon_context_create(MPI_Comm comm, const char* resource, dmuon_context_t* ctx) {
  return guarded(nullptr, [&] {
    require_out(ctx, "dmuon_context_create", "ctx");
    require_out(resource, "dmuon_context_create", "resource");
    int initialized = 0;
    MPI_Initialized(&initialized);
    require(initialized, DMUON_ERR_MPI, "dmuon_context_create: MPI is not initialized");
    require(comm != MPI_COMM_NULL, DMUON_ERR_INVALID_VALUE, "dmuon_context_create: comm is MPI_COMM_NULL");
    auto c = std::make_unique<dmuon_context_s>();
    require(MPI_Comm_dup(comm, &c->comm) == MPI_SUCCESS, DMUON_ERR_MPI, "dmuon_context_create: MPI_Comm_dup failed");
    // Collectives inside dmuon return their errors instead of aborting the job.
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    try {
      c->backend = make_backend(resource, c->comm);
    } catch (...) {
      MPI_Comm_free(&c->comm);
      throw;
    }
    *ctx = c.release();
  });
}

int dmuon_context_create_f(MPI_Fint comm, const char* resource, dmuon_context_t* ctx) {
  return dmuon_context_create(MPI_Comm_f2c(comm), resource, ctx);
}

// Destroy never hangs and always releases the handle. It returns a failure
// that it finds itself (the backend's bounded close: a dead peer seen while
// waiting for the device), not one an earlier call already reported. While
// optimizers of the context live, only the handle goes: the last optimizer
// destroyed closes the context.
int dmuon_context_destroy(dmuon_context_t* ctx) {
  if (ctx == nullptr || *ctx == nullptr) return DMUON_SUCCESS;
  if (!valid(*ctx)) return with_context(*ctx, "dmuon_context_destroy", [](dmuon_context_s&) {});
  dmuon_context_s* c = std::exchange(*ctx, nullptr);
  c->handle_released = true;
  return release_context(c);
}

int dmuon_context_backend(dmuon_context_t ctx, char* buf, size_t len) {
  return with_context(ctx, "dmuon_context_backend", [&](dmuon_context_s& c) {
    require_out(buf, "dmuon_context_backend", "buf");
    const std::string name = c.backend->name();
    require(len > name.size(), DMUON_ERR_INVALID_VALUE, "dmuon_context_backend: buffer too small");
    std::memcpy(buf, name.c_str(), name.size() + 1);
  });
}

int dmuon_context_rank(dmuon_context_t ctx, int* rank, int* size) {
  return with_context(ctx, "dmuon_context_rank", [&](dmuon_context_s& c) {
    if (rank) *rank = c.rank;
    if (size) *size = c.size;
  });
}

const char* dmuon_context_last_error(dmuon_context_t ctx) {
  // Also for a context whose handle was destroyed while an optimizer keeps
  // it: its failures are still recorded there (the Fortran module asks so).
  if (ctx && ctx->magic == kContextMagic) return ctx->last_error.c_str();
  return orphan_last_error().c_str();
}

int dmuon_optimizer_create(dmuon_context_t ctx, const dmuon_options_t* options, dmuon_optimizer_t* opt) {
  return with_context(ctx, "dmuon_optimizer_create", [&](dmuon_context_s& c) {
    require_out(opt, "dmuon_optimizer_create", "opt");
    const dmuon_options_t o = read_options(options, "dmuon_optimizer_create");
    *opt = new dmuon_optimizer_s(&c, o);
    ++c.references;  // released by dmuon_optimizer_destroy
  });
}

// As dmuon_context_destroy: the wait for the optimizer's work is bounded by
// the collective timeout, its failure is returned, and the handle goes either
// way. The optimizer's reference on its context goes last, after its storage.
int dmuon_optimizer_destroy(dmuon_optimizer_t* opt) {
  if (opt == nullptr || *opt == nullptr) return DMUON_SUCCESS;
  if (!valid(*opt)) return with_optimizer(*opt, "dmuon_optimizer_destroy", [](Optimizer&) {});
  dmuon_context_s* ctx = (*opt)->impl.context();
  const int status = with_optimizer(*opt, "dmuon_optimizer_destroy", [&](Optimizer& o) {
    // A poisoned backend frees nothing that the abandoned operation may touch
    // and waits for nothing; a healthy one finishes the queued work first.
    if (!o.backend().failed_status()) o.backend().synchronize();
  });
  if (status != DMUON_SUCCESS && ctx->references == 1) orphan_last_error() = ctx->last_error;  // dies below
  (*opt)->magic = kDeadMagic;
  {
    ScopedDevice on_device(ctx->backend.get());  // the storage is freed on the context's device
    delete *opt;
  }
  *opt = nullptr;
  const int closed = release_context(ctx);
  return status != DMUON_SUCCESS ? status : closed;
}

int dmuon_register(dmuon_optimizer_t opt, const char* name, int kind, int dtype, int ndim, const int64_t* shape,
                   double lr_mul, double wd_mul, int* id) {
  return with_optimizer(opt, "dmuon_register", [&](Optimizer& o) {
    const int i = o.add_param(name, kind, dtype, ndim, shape, lr_mul, wd_mul);
    if (id) *id = i;
  });
}

int dmuon_optimizer_finalize(dmuon_optimizer_t opt) {
  return with_optimizer(opt, "dmuon_optimizer_finalize", [&](Optimizer& o) { o.finalize(); });
}

int dmuon_num_params(dmuon_optimizer_t opt, int* count) {
  return with_optimizer(opt, "dmuon_num_params", [&](Optimizer& o) {
    require_out(count, "dmuon_num_params", "count");
    *count = static_cast<int>(o.registry().size());
  });
}

int dmuon_param_id(dmuon_optimizer_t opt, const char* name, int* id) {
  return with_optimizer(opt, "dmuon_param_id", [&](Optimizer& o) {
    require_out(name, "dmuon_param_id", "name");
    require_out(id, "dmuon_param_id", "id");
    const int i = o.registry().find(name);
    require(i >= 0, DMUON_ERR_INVALID_PARAM_ID, std::string("dmuon_param_id: no parameter named '") + name + "'");
    *id = i;
  });
}

int dmuon_param_view(dmuon_optimizer_t opt, int id, void** data, void** grad) {
  return with_optimizer(opt, "dmuon_param_view", [&](Optimizer& o) { o.param_view(id, data, grad); });
}

int dmuon_views_epoch(dmuon_optimizer_t opt, int64_t* epoch) {
  return with_optimizer(opt, "dmuon_views_epoch", [&](Optimizer& o) {
    require_out(epoch, "dmuon_views_epoch", "epoch");
    require(o.finalized(), DMUON_ERR_NOT_FINALIZED, "dmuon_views_epoch: call dmuon_optimizer_finalize first");
    *epoch = o.views_epoch();
  });
}

int dmuon_param_numel(dmuon_optimizer_t opt, int id, int64_t* numel) {
  return with_optimizer(opt, "dmuon_param_numel", [&](Optimizer& o) {
    require_out(numel, "dmuon_param_numel", "numel");
    *numel = o.param(id).numel;
  });
}

int dmuon_set_external_grad(dmuon_optimizer_t opt, int id, const void* grad) {
  return with_optimizer(opt, "dmuon_set_external_grad", [&](Optimizer& o) { o.set_external_grad(id, grad); });
}

int dmuon_broadcast_params(dmuon_optimizer_t opt, int root) {
  return with_optimizer(opt, "dmuon_broadcast_params", [&](Optimizer& o) { broadcast_params(o, root); });
}

int dmuon_check_replicas(dmuon_optimizer_t opt) {
  return with_optimizer(opt, "dmuon_check_replicas", [&](Optimizer& o) { check_replicas(o, "dmuon_check_replicas"); });
}

int dmuon_step(dmuon_optimizer_t opt) {
  return with_optimizer(opt, "dmuon_step", [&](Optimizer& o) { o.step(); });
}

int dmuon_mark_no_grad(dmuon_optimizer_t opt, int id) {
  return with_optimizer(opt, "dmuon_mark_no_grad", [&](Optimizer& o) { o.mark_no_grad(id); });
}


}  // extern "C"

namespace {
// Change a copy of the options, validate it, and only then store it.
template <class F>
int update_options(dmuon_optimizer_t opt, const char* call, F&& change) {
  return with_optimizer(opt, call, [&](Optimizer& o) {
    dmuon_options_t next = o.options();
    change(next);
    o.set_options(next);
  });
}
void require_kind(int kind, const char* call) {
  require(kind == DMUON_KIND_MUON || kind == DMUON_KIND_ADAM, DMUON_ERR_INVALID_KIND,
          std::string(call) + ": kind must be DMUON_KIND_MUON or DMUON_KIND_ADAM");
}
}  // namespace

extern "C" {

int dmuon_set_lr(dmuon_optimizer_t opt, int kind, double lr) {
  const int status = update_options(opt, "dmuon_set_lr", [&](dmuon_options_t& o) {
    require_kind(kind, "dmuon_set_lr");
    (kind == DMUON_KIND_MUON ? o.muon_lr : o.adam_lr) = lr;
  });
  if (status == DMUON_SUCCESS) opt->impl.clear_lr_schedule(kind);  // the setter overrides a schedule
  return status;
}

int dmuon_set_weight_decay(dmuon_optimizer_t opt, int kind, double wd) {
  return update_options(opt, "dmuon_set_weight_decay", [&](dmuon_options_t& o) {
    require_kind(kind, "dmuon_set_weight_decay");
    (kind == DMUON_KIND_MUON ? o.muon_weight_decay : o.adam_weight_decay) = wd;
  });
}

int dmuon_set_betas(dmuon_optimizer_t opt, double beta1, double beta2) {
  return update_options(opt, "dmuon_set_betas", [&](dmuon_options_t& o) {
    o.adam_beta1 = beta1;
    o.adam_beta2 = beta2;
  });
}

int dmuon_set_eps(dmuon_optimizer_t opt, double eps) {
  return update_options(opt, "dmuon_set_eps", [&](dmuon_options_t& o) { o.adam_eps = eps; });
}

int dmuon_set_momentum(dmuon_optimizer_t opt, double momentum) {
  return update_options(opt, "dmuon_set_momentum", [&](dmuon_options_t& o) { o.muon_momentum = momentum; });
}

int dmuon_set_max_grad_norm(dmuon_optimizer_t opt, double max_norm) {
  return update_options(opt, "dmuon_set_max_grad_norm", [&](dmuon_options_t& o) { o.max_grad_norm = max_norm; });
}

int dmuon_get_options(dmuon_optimizer_t opt, dmuon_options_t* options) {
  return with_optimizer(opt, "dmuon_get_options", [&](Optimizer& o) {
    require_out(options, "dmuon_get_options", "options");
    *options = o.options();
  });
}

int dmuon_get_step_count(dmuon_optimizer_t opt, int64_t* steps) {
  return with_optimizer(opt, "dmuon_get_step_count", [&](Optimizer& o) {
    require_out(steps, "dmuon_get_step_count", "steps");
    *steps = o.step_count();
  });
}

int dmuon_synchronize(dmuon_optimizer_t opt) {
  return with_optimizer(opt, "dmuon_synchronize", [&](Optimizer& o) { o.backend().synchronize(); });
}

int dmuon_get_clip_stats(dmuon_optimizer_t opt, dmuon_clip_stats_t* stats) {
  return with_optimizer(opt, "dmuon_get_clip_stats", [&](Optimizer& o) {
    require_out(stats, "dmuon_get_clip_stats", "stats");
    *stats = o.clip_stats();
  });
}

int dmuon_param_owner(dmuon_optimizer_t opt, int id, int* rank) {
  return with_optimizer(opt, "dmuon_param_owner", [&](Optimizer& o) {
    require_out(rank, "dmuon_param_owner", "rank");
    *rank = o.owner(id);
  });
}

int dmuon_state_bytes(dmuon_optimizer_t opt, int64_t* bytes) {
  return with_optimizer(opt, "dmuon_state_bytes", [&](Optimizer& o) {
    require_out(bytes, "dmuon_state_bytes", "bytes");
    *bytes = o.state_bytes();
  });
}

}  // extern "C"
