// The watchdog path of the CPU backend (collective_timeout_ms > 0: MPI
// non-blocking collectives completed by a test loop) against the blocking
// path: the same steps give the same state, and a rank that arrives later than
// the timeout makes every rank fail with DMUON_ERR_TIMEOUT, not hang.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <thread>

#include "hardening/state_snapshot.hpp"
#include "mpi/muon_model.hpp"

namespace {

dmuon_options_t options_with_timeout(int ms) {
  dmuon_options_t o = DMUON_OPTIONS_INIT;
  o.max_grad_norm = 0.5;  // the step then has the norm all-reduce too
  o.collective_timeout_ms = ms;
  return o;
}

// Open MPI's non-blocking collectives (libnbc) and its blocking ones (tuned)
// may pick different algorithms; at the message sizes of this model both sum
// in rank order, which this test pins down. If a future MPI breaks it, the
// docs (docs/determinism.md) already say that the two paths are not promised
// to agree bitwise; this test is then the place that notices.
TEST(TimeoutPath, SameStateAsBlockingCollectives) {
  muon_test::Model blocking(options_with_timeout(0));
  muon_test::Model watched(options_with_timeout(60000));
  for (int step = 0; step < 4; ++step) {
    blocking.write_grads(step, 1.0);
    watched.write_grads(step, 1.0);
    ASSERT_EQ(dmuon_step(blocking.opt), DMUON_SUCCESS) << dmuon_context_last_error(blocking.ctx);
    ASSERT_EQ(dmuon_step(watched.opt), DMUON_SUCCESS) << dmuon_context_last_error(watched.ctx);
    EXPECT_EQ(hardening::first_difference(hardening::snapshot(blocking.opt), hardening::snapshot(watched.opt)), "")
        << "step " << step;
  }
  watched.expect_identical_across_ranks();
}

// The last rank sleeps past the deadline before its step. The others time
// out in the first collective; the late rank's own collectives then find
// partners that have given up, and it times out too. Afterwards every
// optimizer refuses to step and is destroyed while MPI may still hold the
// abandoned operations (the sanitizer build checks that nothing they touch
// has been freed).
TEST(TimeoutPath, LateRankMakesEveryRankTimeOut) {
  const int timeout_ms = 400;
  muon_test::Model m(options_with_timeout(timeout_ms));
  m.write_grads(0, 1.0);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  const hardening::Snapshot before = hardening::snapshot(m.opt);
  if (m.rank == m.world - 1 && m.world > 1) std::this_thread::sleep_for(std::chrono::milliseconds(3 * timeout_ms));
  m.write_grads(1, 1.0);
  const int rc = dmuon_step(m.opt);
  if (m.world == 1) {
    EXPECT_EQ(rc, DMUON_SUCCESS);  // nobody to wait for
    return;
  }
  EXPECT_EQ(rc, DMUON_ERR_TIMEOUT) << dmuon_context_last_error(m.ctx);
  EXPECT_EQ(dmuon_step(m.opt), DMUON_ERR_TIMEOUT);
  // The first collective of the step is a reduction of gradients: a rank that
  // timed out there has not touched its state (the late rank may have got
  // further, so only the others are checked).
  if (m.rank != m.world - 1) EXPECT_EQ(hardening::first_difference(before, hardening::snapshot(m.opt)), "");
  // Other contexts on the same communicator are not affected.
  muon_test::Model fresh(options_with_timeout(0));
  fresh.write_grads(0, 1.0);
  EXPECT_EQ(dmuon_step(fresh.opt), DMUON_SUCCESS) << dmuon_context_last_error(fresh.ctx);
}

}  // namespace
