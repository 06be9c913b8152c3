#!/usr/bin/env bash
# A real single-host Slurm for tests and CI: munged, slurmctld and slurmd on this machine, one node
# (this host: its CPUs and memory) in one partition. Debian 12's slurm-wlm 22.05 and munge, no
# cgroups (it runs in containers): proctrack/linuxproc, task/none, no accounting. Runs as root.
#
#   scripts/slurm_local.sh start    start what is not running, wait until the node is idle
#   scripts/slurm_local.sh stop     stop the three daemons
#   scripts/slurm_local.sh status   what runs, and sinfo (exit 0 when the node is up)
#   scripts/slurm_local.sh env      the environment clients need: eval "$(scripts/slurm_local.sh env)"
#
# Everything (munge key and socket, slurm.conf, spool, state, logs, pid files) lives in
# SWAVG_SLURM_DIR (default /tmp/swavg-slurm); nothing under /etc is written. Clients (sbatch,
# sinfo, squeue) find the cluster through SLURM_CONF=$SWAVG_SLURM_DIR/slurm.conf.
# SWAVG_SLURM_WAIT: seconds start waits for the node to become idle (default 60).
set -euo pipefail

STATE=${SWAVG_SLURM_DIR:-/tmp/swavg-slurm}
WAIT=${SWAVG_SLURM_WAIT:-60}
CONF=$STATE/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2
NODE=$(hostname -s)
export SLURM_CONF=$CONF

die() { echo "slurm_local: $*" >&2; exit 1; }

# The pid in FILE when that process is alive and is NAME (not a stale file's reused pid).
live_pid() {  # FILE NAME
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}

node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1 || true; }

require_tools() {
  local t
  [ "$(id -u)" = 0 ] || die "must run as root (slurmd runs jobs as their users)"
  for t in munged mungekey slurmctld slurmd sinfo sbatch scontrol; do
    command -v "$t" >/dev/null || die "$t not found: install Debian's slurm-wlm and munge (apt-get install -y slurm-wlm munge)"
  done
}

write_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  # RealMemory above what slurmd measures drains the node: leave 5% for the kernel's own rounding.
  mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.95 }' /proc/meminfo)
  mkdir -p "$STATE/ctld" "$STATE/spool" "$STATE/log"
  cat > "$CONF.new" <<EOF
# Written by scripts/slurm_local.sh: a single-host cluster for tests.
ClusterName=swavg
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldPort=${SWAVG_SLURMCTLD_PORT:-6817}
SlurmdPort=${SWAVG_SLURMD_PORT:-6818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobContainerType=job_container/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.new" "$CONF"
}

start_munge() {
  live_pid "$STATE/munge/munged.pid" munged >/dev/null && return 0
  mkdir -p "$STATE/munge"
  chmod 755 "$STATE/munge"
  [ -s "$STATE/munge/munge.key" ] || mungekey --create --keyfile="$STATE/munge/munge.key"
  chmod 400 "$STATE/munge/munge.key"
  # --force: munged refuses root and a socket under the world-writable /tmp without it.
  munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --seed-file="$STATE/munge/munged.seed" \
    --log-file="$STATE/log/munged.log" \
    || die "munged did not start; see $STATE/log/munged.log"
}

start_daemon() {  # NAME
  live_pid "$STATE/$1.pid" "$1" >/dev/null && return 0
  "$1" -f "$CONF" >>"$STATE/log/$1.start" 2>&1 \
    || die "$1 did not start; see $STATE/log/$1.log and $STATE/log/$1.start"
}

wait_idle() {
  local deadline=$((SECONDS + WAIT)) state="" name
  while [ $SECONDS -lt $deadline ]; do
    state=$(node_state)
    case $state in
      idle|mixed|allocated|completing) return 0 ;;
    esac
    sleep 1
  done
  for name in slurmctld slurmd; do
    live_pid "$STATE/$name.pid" "$name" >/dev/null || echo "slurm_local: $name is not running" >&2
    grep -h -E 'error|fatal' "$STATE/log/$name.log" 2>/dev/null | tail -n 3 >&2 || true
  done
  die "node $NODE not idle after ${WAIT}s (state: '${state:-no answer from slurmctld}'); see $STATE/log/"
}

cmd_start() {
  require_tools
  if live_pid "$STATE/munge/munged.pid" munged >/dev/null && live_pid "$STATE/slurmctld.pid" slurmctld >/dev/null \
     && live_pid "$STATE/slurmd.pid" slurmd >/dev/null && [ "$(node_state)" = idle ]; then
    echo "slurm_local: already up (node $NODE idle, SLURM_CONF=$CONF)"
    return 0
  fi
  mkdir -p "$STATE"
  write_conf
  start_munge
  start_daemon slurmctld
  start_daemon slurmd
  wait_idle
  echo "slurm_local: up (node $NODE $(node_state), $(nproc) CPUs, SLURM_CONF=$CONF)"
}

stop_pidfile() {  # NAME PIDFILE
  local pid _
  pid=$(live_pid "$2" "$1") || return 0
  kill "$pid"
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  die "$1 (pid $pid) still running 5 s after SIGTERM"
}

cmd_stop() {
  stop_pidfile slurmd "$STATE/slurmd.pid"
  stop_pidfile slurmctld "$STATE/slurmctld.pid"
  stop_pidfile munged "$STATE/munge/munged.pid"
  echo "slurm_local: stopped"
}

cmd_status() {
  local up=0 name file pid
  for name in munged slurmctld slurmd; do
    file=$STATE/$name.pid
    [ $name = munged ] && file=$STATE/munge/munged.pid
    if pid=$(live_pid "$file" "$name"); then
      echo "$name: running (pid $pid)"
    else
      echo "$name: not running"
      up=1
    fi
  done
  if [ $up = 0 ]; then
    sinfo -N -o "%N %T %c %m" || up=1
  fi
  return $up
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
