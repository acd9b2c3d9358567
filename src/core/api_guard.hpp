// The C boundary: every public call runs its body through guarded(), which
// turns an exception into a status and the context's last-error message.
// Nothing thrown inside the library ever crosses into C or Fortran.
#pragma once
#include <new>
#include <string>

#include "core/context.hpp"
#include "core/error.hpp"
#include "core/optimizer.hpp"

namespace dmuon {

// Message of the last failure that had no context to hold it (NULL handles).
std::string& orphan_last_error();

inline void record_error(dmuon_context_s* ctx, const std::string& message) {
  (ctx ? ctx->last_error : orphan_last_error()) = message;
}

template <class F>
int guarded(dmuon_context_s* ctx, F&& body) {
  try {
    body();
    return DMUON_SUCCESS;
  } catch (const Error& e) {
    record_error(ctx, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    record_error(ctx, "out of memory");
    return DMUON_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    record_error(ctx, std::string("internal error: ") + e.what());
    return DMUON_ERR_INTERNAL;
  } catch (...) {
    record_error(ctx, "internal error: unknown exception");
    return DMUON_ERR_INTERNAL;
  }
}

// A context whose handle the user destroyed is no longer valid as an
// argument, although its optimizers may keep it alive.
inline bool valid(const dmuon_context_s* ctx) {
  return ctx && ctx->magic == kContextMagic && !ctx->handle_released;
}
inline bool valid(const dmuon_optimizer_s* opt) { return opt && opt->magic == kOptimizerMagic; }

// Run `body(Optimizer&)` on a checked optimizer handle.
template <class F>
int with_optimizer(dmuon_optimizer_s* opt, const char* call, F&& body) {
  if (!valid(opt)) {
    record_error(nullptr, std::string(call) + ": the optimizer handle is NULL, destroyed or not an optimizer");
    return DMUON_ERR_NULL_HANDLE;
  }
  return guarded(opt->impl.context(), [&] {
    ScopedDevice on_device(opt->impl.context()->backend.get());
    body(opt->impl);
  });
}

// Drops one reference (the user's handle or an optimizer's) and tears the
// context down with the last one; returns a failure of that teardown.
int release_context(dmuon_context_s* ctx) noexcept;

template <class F>
int with_context(dmuon_context_s* ctx, const char* call, F&& body) {
  if (!valid(ctx)) {
    record_error(nullptr, std::string(call) + ": the context handle is NULL, destroyed or not a context");
    return DMUON_ERR_NULL_HANDLE;
  }
  return guarded(ctx, [&] {
    ScopedDevice on_device(ctx->backend.get());
    body(*ctx);
  });
}

inline void require_out(const void* p, const char* call, const char* what) {
  require(p != nullptr, DMUON_ERR_NULL_POINTER, std::string(call) + ": " + what + " is NULL");
}

}  // namespace dmuon
