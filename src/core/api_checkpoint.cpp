// The C ABI of the checkpoint calls (include/dmuon/dmuon.h, "Checkpoints").
#include <cstddef>
#include <cstring>

#include "core/api_guard.hpp"
#include "core/replicas.hpp"
#include "core/state.hpp"
#include "hdf5_io/checkpoint.hpp"

using namespace dmuon;

extern "C" {

int dmuon_checkpoint_save(dmuon_optimizer_t opt, const char* dir, int64_t user_step,
                          const dmuon_checkpoint_options_t* options) {
  return with_optimizer(opt, "dmuon_checkpoint_save", [&](Optimizer& o) {
    require_out(dir, "dmuon_checkpoint_save", "dir");
    require(o.finalized(), DMUON_ERR_NOT_FINALIZED, "dmuon_checkpoint_save: call dmuon_optimizer_finalize first");
    o.backend().check_not_failed("dmuon_checkpoint_save");  // collective: fail at once after a rank failure
    const dmuon_checkpoint_options_t co = read_checkpoint_options(options, "dmuon_checkpoint_save");
    require(co.keep_last >= 0, DMUON_ERR_INVALID_VALUE, "dmuon_checkpoint_save: keep_last must be >= 0");
    const int keep_last = co.keep_last;
    // A checkpoint stores each replicated parameter once, in shares written
    // by different ranks: copies that differ would be stitched together.
    check_replicas(o, "dmuon_checkpoint_save");
    StateAccess state(o);
    ckpt::save_checkpoint(state, dir, user_step, keep_last);
  });
}

int dmuon_checkpoint_restore(dmuon_optimizer_t opt, const char* path, int64_t* user_step) {
  return with_optimizer(opt, "dmuon_checkpoint_restore", [&](Optimizer& o) {
    require_out(path, "dmuon_checkpoint_restore", "path");
    require(o.finalized(), DMUON_ERR_NOT_FINALIZED, "dmuon_checkpoint_restore: call dmuon_optimizer_finalize first");
    o.backend().check_not_failed("dmuon_checkpoint_restore");  // collective, as for save
    StateAccess state(o);
    const int64_t step = ckpt::restore_checkpoint(state, path);
    if (user_step) *user_step = step;
  });
}

int dmuon_checkpoint_set_attribute(dmuon_optimizer_t opt, const char* key, const char* value) {
  return with_optimizer(opt, "dmuon_checkpoint_set_attribute", [&](Optimizer& o) {
    require_out(key, "dmuon_checkpoint_set_attribute", "key");
    require_out(value, "dmuon_checkpoint_set_attribute", "value");
    const std::string k(key);
    require(!k.empty() && k.find('/') == std::string::npos && k.find('.') != 0, DMUON_ERR_INVALID_VALUE,
            "dmuon_checkpoint_set_attribute: key '" + k + "' must be non-empty, without '/', not starting with '.'");
    require(k.rfind(ckpt::kReservedPrefix, 0) != 0, DMUON_ERR_INVALID_VALUE,
            "dmuon_checkpoint_set_attribute: keys starting with 'dmuon.' are reserved for the library");
    o.user_attributes[k] = value;
  });
}

int dmuon_checkpoint_get_attribute(dmuon_optimizer_t opt, const char* key, char* buf, size_t len) {
  return with_optimizer(opt, "dmuon_checkpoint_get_attribute", [&](Optimizer& o) {
    require_out(key, "dmuon_checkpoint_get_attribute", "key");
    require_out(buf, "dmuon_checkpoint_get_attribute", "buf");
    const auto it = o.restored_attributes.find(key);
    require(it != o.restored_attributes.end(), DMUON_ERR_NOT_FOUND,
            std::string("dmuon_checkpoint_get_attribute: no attribute '") + key + "' was restored");
    require(it->second.size() < len, DMUON_ERR_INVALID_VALUE,
            "dmuon_checkpoint_get_attribute: '" + std::string(key) + "' needs a buffer of " +
                std::to_string(it->second.size() + 1) + " bytes");
    std::memcpy(buf, it->second.c_str(), it->second.size() + 1);
  });
}

}  // extern "C"
