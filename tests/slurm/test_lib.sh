# shellcheck shell=bash
# Shared by the slurm tests (test_*.sh): failure reporting, the test cluster's
# lifetime (install, start, stop on every exit path, scratch directory), and
# job helpers with bounded waits. Sourced.

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
note() { echo "== $*"; }

slurm_test_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/slurm/cluster.sh
source "$slurm_test_dir/cluster.sh"

# slurm_test_setup GPUS: installs Slurm and munge when missing, starts the
# cluster under a new $scratch (GPUS stand-in GPUs), cds there. The EXIT trap
# stops the daemons whatever happens next; the scratch directory is removed
# after a pass (kept after a failure, or with DMUON_KEEP_SLURM_SCRATCH=1).
slurm_test_setup() {
  note "installing Slurm and munge when missing"
  "$slurm_test_dir/install_slurm.sh" || fail "could not install slurm-wlm and munge"
  scratch=$(mktemp -d /tmp/dmuon-slurm-test.XXXXXX)
  trap slurm_test_cleanup EXIT
  # A TERM from ctest (or ^C) still stops the daemons.
  trap 'exit 143' TERM
  trap 'exit 130' INT
  note "starting a single-node Slurm under $scratch"
  slurm_cluster_start "$scratch" "$1" || fail "Slurm did not start (logs above)"
  timeout 10 sinfo -o '%P %a %D %t %N %G'
  # Open MPI as root, and no cross-memory attach in containers; sbatch passes
  # the environment on to the jobs.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  cd "$scratch" || fail "cd $scratch"
}

slurm_test_cleanup() {
  local status=$?
  trap - EXIT INT TERM
  note "stopping Slurm and munge"
  slurm_cluster_stop "$scratch"
  if [ "$status" -eq 0 ] && [ -z "${DMUON_KEEP_SLURM_SCRATCH:-}" ]; then
    rm -rf "$scratch"
  else
    echo "scratch directory kept: $scratch"
  fi
  exit "$status"
}

# submit NAME SCRIPT [sbatch options] -- [script arguments]: prints the job id.
submit() {
  local name=$1 script=$2 id
  shift 2
  local options=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    options+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  id=$(timeout 30 sbatch --parsable --job-name="$name" "${options[@]}" "$script" "$@") ||
    fail "sbatch of $name failed"
  echo "${id%%;*}"
}

job_field() {  # job_field ID FIELD: one field of `scontrol show job`
  timeout 10 scontrol -o show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

job_ended() {
  case "$(job_field "$1" JobState)" in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;;
    *) return 1 ;;
  esac
}

show_job() {  # show_job ID OUTPUT: what a failure needs to be understood
  echo "---- scontrol show job $1" >&2
  timeout 10 scontrol show job "$1" >&2 || true
  echo "---- $2" >&2
  cat "$2" >&2 2>/dev/null || true
  echo "---- slurmctld.log (tail)" >&2
  tail -n 20 "$scratch/log/slurmctld.log" >&2 2>/dev/null || true
}

wait_job_end() {  # wait_job_end ID OUTPUT SECONDS
  if ! slurm_wait_for "$3" job_ended "$1"; then
    show_job "$1" "$2"
    fail "job $1 did not end within $3 s"
  fi
}

# expect_state ID OUTPUT STATE RESTARTS: how the job ended, and how often it was requeued.
expect_state() {
  local state restarts exit_code
  state=$(job_field "$1" JobState)
  restarts=$(job_field "$1" Restarts)
  exit_code=$(job_field "$1" ExitCode)
  note "job $1: JobState=$state Restarts=$restarts ExitCode=$exit_code"
  [ "$state" = "$3" ] || { show_job "$1" "$2"; fail "job $1 ended $state, not $3"; }
  [ "$restarts" = "$4" ] || { show_job "$1" "$2"; fail "job $1: Restarts=$restarts, expected $4"; }
  if [ "$3" = COMPLETED ] && [ "$exit_code" != 0:0 ]; then
    show_job "$1" "$2"
    fail "job $1: ExitCode=$exit_code"
  fi
}

expect_line() {  # expect_line ID OUTPUT REGEX WHAT
  grep -Eq "$3" "$2" || { show_job "$1" "$2"; fail "$4: no line matching '$3' in $2"; }
}
