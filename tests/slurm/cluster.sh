# shellcheck shell=bash
# A real single-node Slurm for the tests, under one scratch directory:
# munged (as the munge user, with a freshly generated key), slurmctld and
# slurmd, all started by hand in the foreground of this shell's background
# jobs, so their PIDs are ours to stop and a killed test takes them along
# (same process group). Nothing outside the scratch directory is configured.
#
#   source tests/slurm/cluster.sh
#   slurm_cluster_start DIR [GPUS]  # exports SLURM_CONF; fails if Slurm does not come up.
#                                   # GPUS (at most 4): a gres/gpu count for the node, backed
#                                   # by stand-in character devices (/dev/null, ...) so that
#                                   # GPU job scripts can be scheduled on a machine without GPUs
#   slurm_cluster_stop DIR      # cancels the jobs, stops the daemons (bounded in time)

# Polls "$@" every half second until it succeeds or $1 seconds have passed.
slurm_wait_for() {
  local seconds=$1
  shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.5
  done
}

# The first TCP port from $1 on that nothing listens on (a connection is refused).
slurm_free_port() {
  local port
  for ((port = $1; port < $1 + 200; ++port)); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

slurm_node_idle() {
  timeout 10 sinfo -h -N -o '%t' | grep -qx 'idle'
}

slurm_cluster_start() {
  local dir=$1 gpus=${2:-0}
  local host cpus ctld_port slurmd_port node_gres=""
  # The short name: slurmctld recognises itself as SlurmctldHost by it. Both
  # daemons are reached at 127.0.0.1, so no name needs to resolve.
  host=$(hostname -s)
  # Not Slurm's default ports: a site's or another test's Slurm may hold them.
  ctld_port=$(slurm_free_port 16817) || { echo "cluster.sh: no free port" >&2; return 1; }
  slurmd_port=$(slurm_free_port $((ctld_port + 1))) || { echo "cluster.sh: no free port" >&2; return 1; }
  # Two ranks need two CPUs; more are declared than present on a one-core
  # machine only (config_overrides keeps slurmd from draining the node then).
  cpus=$(nproc)
  [ "$cpus" -lt 2 ] && cpus=2
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  # The munge user has to reach its files through the scratch directory.
  chmod 755 "$dir"

  # munge: a generated key, its own socket; munged refuses group/other access.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chown -R munge:munge "$dir/munge"
  chmod 400 "$dir/munge/munge.key"
  chmod 755 "$dir/munge"  # clients (root, the jobs) reach the socket in it
  # setpriv execs munged itself (no wrapper process), so $! is munged's PID.
  setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground \
    --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket.2" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" >"$dir/log/munged.out" 2>&1 &
  echo $! >"$dir/munged.launcher.pid"
  if ! slurm_wait_for 20 test -S "$dir/munge/munge.socket.2"; then
    echo "cluster.sh: munged did not start" >&2
    cat "$dir/log/munged.out" "$dir/munge/munged.log" >&2 2>/dev/null
    return 1
  fi

  if [ "$gpus" -gt 0 ]; then
    # slurmd wants character devices for gres files; nothing opens them with
    # TaskPlugin=task/none. Slurm reads gres.conf from slurm.conf's directory.
    local stand_ins=(/dev/null /dev/zero /dev/full /dev/urandom) i
    [ "$gpus" -le ${#stand_ins[@]} ] || { echo "cluster.sh: at most ${#stand_ins[@]} GPUs" >&2; return 1; }
    : >"$dir/gres.conf"
    for ((i = 0; i < gpus; ++i)); do
      echo "Name=gpu File=${stand_ins[$i]}" >>"$dir/gres.conf"
    done
    node_gres="Gres=gpu:$gpus"
  fi

  cat >"$dir/slurm.conf" <<CONF
# Minimal single-node Slurm for dmuon's tests (written by tests/slurm/cluster.sh).
ClusterName=dmuontest
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long before it may start again
# (default 120 s); sched_interval: the scheduler's periodic pass, which is what
# starts a job whose begin time has passed (default 60 s). Short, for the test.
AuthInfo=socket=${dir}/munge/munge.socket.2,cred_expire=10
# No cgroups in a container: track processes through /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
# Keep finished jobs visible to scontrol long enough for the checks.
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/spool
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/slurmd.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
GresTypes=gpu
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} State=UNKNOWN ${node_gres}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"

  # -D: foreground, so $! is the daemon itself; -c: no state from an earlier run.
  slurmctld -D -c -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.launcher.pid"
  # -N: the node it is, whatever the machine's full name looks like.
  slurmd -D -N "$host" -f "$SLURM_CONF" >"$dir/log/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.launcher.pid"
  if ! slurm_wait_for 60 slurm_node_idle; then
    echo "cluster.sh: the node did not become idle within 60 s" >&2
    timeout 10 sinfo -N -l >&2
    tail -n 30 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" "$dir/log/"*.out >&2 2>/dev/null
    return 1
  fi
}

# Stops what slurm_cluster_start started, by the PIDs it recorded. Every wait is
# bounded; a daemon that ignores SIGTERM for 10 s gets SIGKILL. Then any process
# still carrying this cluster's SLURM_CONF in its environment (a slurmstepd or a
# task of a job that outlived scancel) is ended too: only this cluster's
# daemons and jobs have it, as it is exported before they start.
slurm_cluster_stop() {
  local dir=$1
  if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
    # Jobs first, while slurmd is there to kill their processes.
    timeout 10 scancel --full --quiet --user=root >/dev/null 2>&1 || true
    slurm_wait_for 20 slurm_no_jobs || echo "cluster.sh: jobs still listed after scancel" >&2
  fi
  local name pid
  for name in slurmd slurmctld munged; do
    [ -f "$dir/$name.launcher.pid" ] || continue
    pid=$(cat "$dir/$name.launcher.pid")
    kill -TERM "$pid" 2>/dev/null || continue
    slurm_wait_for 10 slurm_pid_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
  done
  for pid in $(slurm_cluster_pids "$dir"); do
    echo "cluster.sh: ending leftover process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" >&2
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# PIDs of the processes whose environment holds SLURM_CONF=DIR/slurm.conf,
# this shell and its ancestors excepted (they exported it).
slurm_cluster_pids() {
  local want="SLURM_CONF=$1/slurm.conf" env pid
  local -A skip=()
  pid=$$
  while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    skip[$pid]=1
    pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  done
  for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}
    pid=${pid%/environ}
    [ -n "${skip[$pid]:-}" ] && continue
    [ "$pid" = "$BASHPID" ] && continue
    if tr '\0' '\n' 2>/dev/null <"$env" | grep -qxF "$want"; then
      echo "$pid"
    fi
  done
}

slurm_no_jobs() {
  [ -z "$(timeout 10 squeue -h -o '%i' 2>/dev/null)" ]
}

slurm_pid_gone() {
  ! kill -0 "$1" 2>/dev/null
}
