#!/usr/bin/env bash
# The decision table of jobscripts/lib/dmuon_job.sh, every row, without Slurm:
#
#   tests/slurm/test_job_helper.sh SOURCE_DIR
#
# A small batch script sources the helper and runs a stand-in program as its
# job step; scancel and scontrol are stand-ins on PATH that record their calls
# (and scancel --signal delivers the signal to the stand-in program, as
# slurmstepd would). Each case checks the batch script's exit status, whether
# it requeued, and its log. The real-Slurm tests (test_requeue.sh) cover the
# main path end to end; this one covers the rows a real run rarely takes.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 SOURCE_DIR" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/dmuon-job-helper-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0

mkdir -p "$work/bin"
# scancel --signal=SIG JOB: record, then signal the running stand-in program.
cat >"$work/bin/scancel" <<'EOF'
#!/bin/bash
echo "scancel $*" >>"$FAKE_CALLS"
sig=${1#--signal=}
[ -f "$FAKE_STEP_PID" ] && kill "-$sig" "$(cat "$FAKE_STEP_PID")"
exit 0
EOF
# scontrol requeue JOB: record it.
cat >"$work/bin/scontrol" <<'EOF'
#!/bin/bash
echo "scontrol $*" >>"$FAKE_CALLS"
exit 0
EOF
# The job step: writes its PID, then behaves as $FAKE_MODE says:
#   exit:N          exit N at once
#   wait:N          wait for SIGUSR1 (handler installed), then exit N
#   die             wait for SIGUSR1 without a handler: killed by it
#   wait-done:N     as wait:N, writing the done file first
cat >"$work/bin/step" <<'EOF'
#!/bin/bash
mode=${FAKE_MODE%%:*}
code=${FAKE_MODE#*:}
case $mode in
  exit) exit "$code" ;;
  wait | wait-done)
    got=0
    trap 'got=1' USR1
    echo $$ >"$FAKE_STEP_PID"
    for _ in $(seq 100); do
      [ "$got" -eq 1 ] && break
      sleep 0.1
    done
    [ "$got" -eq 1 ] || exit 99  # never signalled
    [ "$mode" = wait-done ] && touch DONE
    exit "$code" ;;
  die)
    echo $$ >"$FAKE_STEP_PID"
    sleep 10
    exit 98 ;;
esac
EOF
# The batch script, as jobscripts/*_job.sh use the helper.
cat >"$work/batch.sh" <<EOF
#!/bin/bash
source "$src/jobscripts/lib/dmuon_job.sh" || exit 1
dmuon_job_begin
dmuon_job_enter_run_dir
[ -n "\${FAKE_EARLY_SIGNAL:-}" ] && kill -USR1 \$\$
dmuon_job_run step
dmuon_job_finish
EOF
chmod +x "$work/bin/"* "$work/batch.sh"

# check NAME MODE SIGNAL EXPECT_STATUS EXPECT_REQUEUE LOG_REGEX [VAR=VALUE...]
#   SIGNAL: yes sends SIGUSR1 to the batch shell once the step runs; early
#   sends it before the step starts.
check() {
  local name=$1 mode=$2 signal=$3 want_status=$4 want_requeue=$5 regex=$6
  shift 6
  local dir=$work/$name status=0 requeued=no
  mkdir -p "$dir"
  : >"$dir/calls"
  (
    export PATH="$work/bin:$PATH" FAKE_MODE=$mode FAKE_CALLS=$dir/calls FAKE_STEP_PID=$dir/step.pid
    export SLURM_JOB_ID=42 SLURM_JOB_NAME=helper SLURM_SUBMIT_DIR=$dir DMUON_RUN_DIR=$dir/run
    [ "$signal" = early ] && export FAKE_EARLY_SIGNAL=1
    for assignment in "$@"; do export "${assignment?}"; done
    "$work/batch.sh" >"$dir/log" 2>&1 &
    batch=$!
    if [ "$signal" = yes ]; then
      for _ in $(seq 100); do
        [ -s "$dir/step.pid" ] && break
        sleep 0.1
      done
      kill -USR1 "$batch"
    fi
    wait "$batch"
  ) || status=$?
  grep -q "^scontrol requeue 42$" "$dir/calls" && requeued=yes
  if [ "$status" -ne "$want_status" ] || [ "$requeued" != "$want_requeue" ] || ! grep -Eq "$regex" "$dir/log"; then
    echo "FAIL $name: status $status (want $want_status), requeued $requeued (want $want_requeue), log:"
    sed 's/^/  /' "$dir/log" "$dir/calls"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
  if [ "$signal" = yes ] && ! grep -q "^scancel --signal=USR1 42$" "$dir/calls"; then
    echo "FAIL $name: the signal was not forwarded to the job step"
    failures=$((failures + 1))
  fi
}

check finished exit:0 no 0 no '\] FINISHED$'
check failed exit:3 no 3 no '\] FAILED: program exited with status 3$'
check asks-requeue exit:75 no 0 yes 'asked to be run again \(status 75\)'
check custom-code exit:9 no 0 yes 'asked to be run again \(status 9\)' DMUON_REQUEUE_EXIT_CODE=9
check zero-after-signal wait:0 yes 0 yes 'exited 0 after the checkpoint signal'
check requeue-code-after-signal wait:75 yes 0 yes 'asked to be run again'
check killed-by-signal die yes 0 yes 'failed \(status [0-9]+\) after the checkpoint signal'
check done-file wait-done:0 yes 0 no 'FINISHED: DONE exists' DMUON_DONE_FILE=DONE
check no-done-file exit:0 no 0 yes 'without writing DONE: more to do' DMUON_DONE_FILE=DONE
check signal-before-step exit:0 early 0 yes 'came before the job step started'
check max-restarts exit:75 no 1 no 'FAILED: 20 restarts already' SLURM_RESTART_COUNT=20
check restart-count-logged exit:0 no 0 no 'restart 3\] start: SLURM_RESTART_COUNT=3 ' SLURM_RESTART_COUNT=3

# Chain mode (DMUON_RESUBMIT=chain, jobscripts/submit_chain.sh): no requeue;
# the end of the run leaves a marker that makes later jobs of the chain exit
# at once, without a job step.
check chain-checkpointed exit:75 no 0 no 'CHAIN: the next job of the chain continues' DMUON_RESUBMIT=chain
check chain-after-signal wait:0 yes 0 no 'CHAIN: the next job' DMUON_RESUBMIT=chain
check chain-finished exit:0 no 0 no '\] FINISHED$' DMUON_RESUBMIT=chain
[ -e "$work/chain-finished/run/CHAIN_FINISHED" ] || { echo "FAIL chain-finished: no CHAIN_FINISHED marker"; failures=$((failures + 1)); }
check chain-failed exit:4 no 4 no 'FAILED: program exited with status 4' DMUON_RESUBMIT=chain
[ -e "$work/chain-failed/run/CHAIN_FAILED" ] || { echo "FAIL chain-failed: no CHAIN_FAILED marker"; failures=$((failures + 1)); }
# The next job of each: the marker ends it before the step (exit:3 would fail it).
check chain-after-finished exit:3 no 0 no 'FINISHED already' DMUON_RESUBMIT=chain "DMUON_RUN_DIR=$work/chain-finished/run"
check chain-after-failed exit:0 no 1 no 'an earlier job of the chain failed' DMUON_RESUBMIT=chain \
  "DMUON_RUN_DIR=$work/chain-failed/run"
check bad-resubmit exit:0 no 2 no 'DMUON_RESUBMIT=sometimes: use requeue or chain' DMUON_RESUBMIT=sometimes
# Requeue mode leaves no marker.
[ ! -e "$work/finished/run/CHAIN_FINISHED" ] || { echo "FAIL finished: a CHAIN_FINISHED marker in requeue mode"; failures=$((failures + 1)); }

if [ "$failures" -ne 0 ]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases passed"
