// The checkpoint library's entry points (dmuon_hdf5_io), the only part of
// hdf5_io that the core includes. Both operations are collective over the
// optimizer's communicator and end with the same outcome on every rank. They
// see the optimizer only through core/state.hpp.
#pragma once
#include <cstdint>
#include <string>

#include "core/state.hpp"

namespace dmuon::ckpt {

// Attribute keys with this prefix are written by dmuon on restore (plan, file
// used); users may not set them.
constexpr const char* kReservedPrefix = "dmuon.";

// Write ckpt_<user_step>.h5 in dir atomically and point `latest` at it; keep
// the newest keep_last checkpoints (0: all). Throws dmuon::Error.
void save_checkpoint(StateAccess& state, const std::string& dir, int64_t user_step, int keep_last);

// Restore from a checkpoint file, or from a directory's `latest` with fallback
// to the newest checkpoint that verifies. Throws dmuon::Error, leaving the
// optimizer untouched. Returns the restored user step.
int64_t restore_checkpoint(StateAccess& state, const std::string& path);

}  // namespace dmuon::ckpt
