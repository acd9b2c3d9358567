// The checkpoint operations behind the C ABI (checkpoint_api.cpp). Both are
// collective over the optimizer's communicator and end with the same outcome
// on every rank.
#pragma once
#include <cstdint>
#include <string>

#include "core/optimizer.hpp"

namespace dmuon::ckpt {

// Write ckpt_<user_step>.h5 in dir atomically and point `latest` at it; keep
// the newest keep_last checkpoints (0: all). Throws dmuon::Error.
void save_checkpoint(Optimizer& opt, const std::string& dir, int64_t user_step, int keep_last);

// Restore from a checkpoint file, or from a directory's `latest` with fallback
// to the newest checkpoint that verifies. Throws dmuon::Error, leaving the
// optimizer untouched. Returns the restored user step.
int64_t restore_checkpoint(Optimizer& opt, const std::string& path);

// The backend's memory can be handed to HDF5 directly (host memory); device
// memory goes through a host staging buffer.
bool backend_is_host(const Optimizer& opt);

}  // namespace dmuon::ckpt
