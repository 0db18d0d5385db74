#!/usr/bin/env bash
# A single-node SLURM (with munge) on this machine, for tests and demos of the cluster path.
#
#   scripts/slurm-local.sh start    # install when missing (root, Debian/Ubuntu), configure, start; idempotent
#   scripts/slurm-local.sh status   # daemons, node state and queue; exit 0 only when the cluster answers
#   scripts/slurm-local.sh stop     # cancel this cluster's jobs, stop the daemons; idempotent
#   scripts/slurm-local.sh env      # the line to eval so sbatch/squeue use this cluster
#
# Everything it writes lives under one folder, LCB_SLURM_DIR (default /tmp/lcb-grid-slurm):
# slurm.conf, the munge key and socket, controller state, slurmd spool, logs and pid files. The
# only thing outside it is /etc/slurm/slurm.conf, linked to ours when no other configuration is
# there (so plain `sbatch` finds this cluster); stop removes that link again.
#
# The node is this host with the CPUs and memory it has (ProctrackType=proctrack/linuxproc and
# TaskPlugin=task/none: no cgroups needed, so it runs in containers); one partition, "local".
# Environment: LCB_SLURM_DIR, LCB_SLURM_PORT (slurmctld's port, default 6817; slurmd uses +1).
set -euo pipefail

STATE="${LCB_SLURM_DIR:-/tmp/lcb-grid-slurm}"
PORT="${LCB_SLURM_PORT:-6817}"
CONF="$STATE/slurm.conf"
MUNGE_SOCKET="$STATE/munge/munge.socket.2"
ETC_CONF=/etc/slurm/slurm.conf
export SLURM_CONF="$CONF"

say() { echo "[slurm-local] $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
  local missing=()
  command -v munged >/dev/null 2>&1 || missing+=(munge)
  command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
  command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
  command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "SLURM is not installed (${missing[*]} missing) and installing needs root"
  command -v apt-get >/dev/null 2>&1 || die "SLURM is not installed and this is not a Debian/Ubuntu system (no apt-get)"
  say "installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  # Packages must not start their own daemons with the distribution's configuration.
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"; made_policy=1; fi
  local rc=0
  { apt-get update -qq && apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends \
      munge slurm-wlm >/dev/null; } || rc=$?
  [ "$made_policy" = 1 ] && rm -f "$policy"
  [ "$rc" = 0 ] || die "apt-get install munge slurm-wlm failed (exit $rc)"
}

node_name() { hostname -s; }

write_conf() {
  local node cpus mem_mb
  node="$(node_name)"
  cpus="$(nproc --all)"
  # RealMemory may not exceed what slurmd measures; leave 5 % and 512 MB for the system.
  mem_mb="$(awk '/^MemTotal:/ {m = int($2 / 1024); m = int(m * 0.95) - 512; if (m < 256) m = 256; print m}' /proc/meminfo)"
  mkdir -p "$STATE"/{ctld,spool,log,run,munge}
  chmod 700 "$STATE/munge"
  local tmp="$CONF.tmp.$$"
  cat >"$tmp" <<EOF
# Written by scripts/slurm-local.sh: a single-node cluster on $node. Regenerated on each start.
ClusterName=lcbgrid
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=$((mem_mb / cpus))
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=600
SchedulerParameters=sched_interval=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$tmp" "$CONF"
}

start_munge() {
  if pid_alive "$STATE/run/munged.pid"; then return 0; fi
  local key="$STATE/munge/munge.key"
  if [ ! -s "$key" ]; then
    dd if=/dev/urandom of="$key.tmp" bs=1024 count=1 status=none
    chmod 400 "$key.tmp"
    mv "$key.tmp" "$key"
  fi
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  munged --force --socket="$MUNGE_SOCKET" --key-file="$key" --pid-file="$STATE/run/munged.pid" \
    --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/munged.seed" \
    || die "munged did not start (see $STATE/log/munged.log)"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit="$1" what="$2"; shift 2
  local waited=0
  until "$@" >/dev/null 2>&1; do
    [ "$waited" -ge "$limit" ] && return 1
    sleep 1; waited=$((waited + 1))
  done
}

node_state() { sinfo -h -N -o '%T' -n "$(node_name)" 2>/dev/null | head -1; }

node_ready() { case "$(node_state)" in idle*|mixed*|allocated*|completing*) return 0 ;; *) return 1 ;; esac; }

link_etc_conf() {
  if [ -L "$ETC_CONF" ] || [ ! -e "$ETC_CONF" ]; then
    mkdir -p "$(dirname "$ETC_CONF")" && ln -sfn "$CONF" "$ETC_CONF" 2>/dev/null || true
  fi
}

cmd_start() {
  if cmd_status >/dev/null 2>&1; then say "already running ($STATE)"; cmd_status; return 0; fi
  install_packages
  [ "$(id -u)" = 0 ] || die "starting the local SLURM needs root (slurmd starts jobs as their users)"
  if ! pid_alive "$STATE/run/slurmctld.pid"; then write_conf; fi
  start_munge
  wait_for 15 munge test -S "$MUNGE_SOCKET" || die "munge socket $MUNGE_SOCKET did not appear"
  if ! pid_alive "$STATE/run/slurmctld.pid"; then
    # -i: ignore state saved by an older configuration that no longer matches (node renamed).
    slurmctld -i -f "$CONF" || die "slurmctld did not start (see $STATE/log/slurmctld.log)"
  fi
  wait_for 30 slurmctld scontrol ping || die "slurmctld does not answer (see $STATE/log/slurmctld.log)"
  if ! pid_alive "$STATE/run/slurmd.pid"; then
    slurmd -f "$CONF" || die "slurmd did not start (see $STATE/log/slurmd.log)"
  fi
  link_etc_conf
  if ! wait_for 30 node node_ready; then
    # A node left down/drained by an unclean stop: it is ours, bring it back.
    scontrol update nodename="$(node_name)" state=resume >/dev/null 2>&1 || true
    wait_for 30 node node_ready || die "node $(node_name) is $(node_state) (see $STATE/log/slurmd.log)"
  fi
  say "running: node $(node_name), $(nproc --all) CPUs, partition local; state in $STATE"
  say "clients: export SLURM_CONF=$CONF"
}

cmd_status() {
  local ok=0
  for daemon in munged slurmctld slurmd; do
    if pid_alive "$STATE/run/$daemon.pid"; then echo "$daemon: running (pid $(cat "$STATE/run/$daemon.pid"))"
    else echo "$daemon: stopped"; ok=1; fi
  done
  [ "$ok" = 0 ] || return 1
  command -v scontrol >/dev/null 2>&1 && scontrol ping >/dev/null 2>&1 || { echo "slurmctld: not answering"; return 1; }
  echo "node: $(node_name) $(node_state)"
  echo "conf: $CONF"
  squeue -h -o '%i %j %T %M' 2>/dev/null | sed 's/^/job: /'
  node_ready
}

cmd_stop() {
  if pid_alive "$STATE/run/slurmctld.pid" && command -v scancel >/dev/null 2>&1; then
    # Only this cluster's jobs: SLURM_CONF points at our configuration.
    scancel --quiet --user="$(id -un)" 2>/dev/null || true
    wait_for 20 jobs sh -c '[ -z "$(squeue -h -o %i 2>/dev/null)" ]' || say "jobs still listed after 20 s; stopping anyway"
  fi
  for daemon in slurmd slurmctld munged; do
    local pidfile="$STATE/run/$daemon.pid"
    if pid_alive "$pidfile"; then
      local pid; pid="$(cat "$pidfile")"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && { say "$daemon (pid $pid) ignored SIGTERM; killing"; kill -9 "$pid" 2>/dev/null || true; }
    fi
    rm -f "$pidfile"
  done
  if [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$CONF" ]; then rm -f "$ETC_CONF"; fi
  say "stopped (state kept in $STATE)"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  -h|--help) sed -n '2,17p' "$0" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
