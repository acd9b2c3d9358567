// Checkpoint save/restore (parallel HDF5). Not implemented yet.
#include "core/api_guard.hpp"

using namespace dmuon;

extern "C" {
int dmuon_checkpoint_save(dmuon_optimizer_t opt, const char*, int64_t, const dmuon_checkpoint_options_t*) {
  return with_optimizer(opt, "dmuon_checkpoint_save", [&](Optimizer&) { fail(DMUON_ERR_NOT_SUPPORTED, "checkpoints are not implemented yet"); });
}
int dmuon_checkpoint_restore(dmuon_optimizer_t opt, const char*, int64_t*) {
  return with_optimizer(opt, "dmuon_checkpoint_restore", [&](Optimizer&) { fail(DMUON_ERR_NOT_SUPPORTED, "checkpoints are not implemented yet"); });
}
int dmuon_checkpoint_set_attribute(dmuon_optimizer_t opt, const char* key, const char* value) {
  return with_optimizer(opt, "dmuon_checkpoint_set_attribute", [&](Optimizer& o) {
    require_out(key, "dmuon_checkpoint_set_attribute", "key");
    require_out(value, "dmuon_checkpoint_set_attribute", "value");
    o.user_attributes[key] = value;
  });
}
int dmuon_checkpoint_get_attribute(dmuon_optimizer_t opt, const char*, char*, size_t) {
  return with_optimizer(opt, "dmuon_checkpoint_get_attribute", [&](Optimizer&) { fail(DMUON_ERR_NOT_SUPPORTED, "checkpoints are not implemented yet"); });
}
}
