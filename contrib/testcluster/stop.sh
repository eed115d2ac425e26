#!/usr/bin/env bash
# Stop the test cluster started by start.sh [STATE_DIR] (default /tmp/sattrib-testcluster).
# Cancels remaining jobs, stops slurmd x4, slurmctld, slurmdbd, mariadbd, munged
# (by their pid files), then ends any leftover job process of this cluster
# (processes whose environment carries this cluster's SLURM_CONF). Idempotent.
set -uo pipefail

STATE_DIR="${1:-${SATTRIB_STATE_DIR:-/tmp/sattrib-testcluster}}"
case "$STATE_DIR" in /*) ;; *) STATE_DIR="$PWD/$STATE_DIR" ;; esac
STATE_DIR="${STATE_DIR%/}"
RUN="$STATE_DIR/run"
CONF="$STATE_DIR/etc/slurm.conf"
log() { printf 'testcluster: %s\n' "$*" >&2; }

if [ ! -d "$RUN" ]; then
    log "nothing to stop in $STATE_DIR"
    exit 0
fi

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
pid_of() { local f="$RUN/$1.pid"; [ -r "$f" ] && tr -dc '0-9' < "$f"; }

# Send TERM to the given pid-file names, wait up to $2 s, then KILL.
stop_group() {
    local timeout="$1"; shift
    local name pid pids=()
    for name in "$@"; do
        pid="$(pid_of "$name")"
        if alive "$pid"; then kill -TERM "$pid" 2>/dev/null; pids+=("$pid"); fi
    done
    [ "${#pids[@]}" -eq 0 ] && return 0
    local i left
    for i in $(seq $((timeout * 10))); do
        left=0
        for pid in "${pids[@]}"; do alive "$pid" && left=1; done
        [ "$left" = 0 ] && return 0
        sleep 0.1
    done
    for pid in "${pids[@]}"; do
        if alive "$pid"; then log "pid $pid did not stop on TERM, sending KILL"; kill -KILL "$pid" 2>/dev/null; fi
    done
    return 0
}

# Processes (job steps, slurmstepd, job tasks) that belong to this cluster.
cluster_procs() {
    local p env
    for p in /proc/[0-9]*; do
        p="${p#/proc/}"
        [ "$p" = "$$" ] && continue
        # never munged: it is shared by all test clusters on this host
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = munged ] && continue
        env="$( { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null )" || continue
        if printf '%s\n' "$env" | grep -qxF "SLURM_CONF=$CONF"; then
            echo "$p"
        fi
    done
}

ctld="$(pid_of slurmctld)"
if alive "$ctld" && [ -r "$CONF" ]; then
    jobs="$(SLURM_CONF="$CONF" timeout 10 squeue -h -o %i 2>/dev/null)"
    if [ -n "$jobs" ]; then
        # shellcheck disable=SC2086
        SLURM_CONF="$CONF" timeout 10 scancel $jobs 2>/dev/null
        for _ in $(seq 100); do
            [ -z "$(SLURM_CONF="$CONF" timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
fi

slurmds=()
for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && slurmds+=("$(basename "$f" .pid)"); done
stop_group 15 "${slurmds[@]}"
stop_group 15 slurmctld
stop_group 15 slurmdbd
stop_group 30 mariadbd
# munged: the default socket is shared by every test cluster on this host, so
# only stop it when we started it and no other slurm daemon is still running.
if [ -e "$RUN/munged.started-here" ]; then
    others="$(ps -eo comm= | grep -cxE 'slurmctld|slurmdbd|slurmd' || true)"
    if [ "${others:-0}" -eq 0 ]; then
        stop_group 10 munged
    else
        log "leaving munged running: $others other slurm daemon(s) on this host use it"
    fi
fi

# Leftover job processes / slurmstepd of this cluster (by exact SLURM_CONF match).
left="$(cluster_procs | grep -vxF "$$" | grep -vxF "$BASHPID" || true)"
if [ -n "$left" ]; then
    log "ending leftover job processes: $(echo $left)"
    # shellcheck disable=SC2086
    kill -TERM $left 2>/dev/null; sleep 1
    left="$(cluster_procs || true)"
    # shellcheck disable=SC2086
    [ -n "$left" ] && kill -KILL $left 2>/dev/null
fi
log "stopped cluster in $STATE_DIR"
exit 0
