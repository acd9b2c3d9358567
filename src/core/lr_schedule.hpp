// Learning-rate schedules of a group (dmuon_set_lr_schedule): validation and
// the rate at a given step, computed on the host into the scalars that the
// step uploads anyway, so a schedule costs the device nothing.
#pragma once
#include <cstdint>

#include "dmuon/dmuon.h"

namespace dmuon {

struct LrSchedule {
  dmuon_lr_schedule_t spec;  // base_lr resolved (>= 0)
  int64_t steps = 0;         // steps taken under it: the next step's t
};

// Throws DMUON_ERR_INVALID_VALUE naming `call` and the offending field.
// base_lr < 0 is accepted (the caller resolves it).
void validate_lr_schedule(const dmuon_lr_schedule_t& s, const char* call);
// The rate of step t (0-based) of the schedule.
double scheduled_lr(const dmuon_lr_schedule_t& s, int64_t t);

}  // namespace dmuon
