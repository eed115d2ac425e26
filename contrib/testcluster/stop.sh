#!/usr/bin/env bash
# Stop the test cluster started by start.sh [STATE_DIR] (default /tmp/sattrib-testcluster).
# Cancels remaining jobs, stops slurmd x4, slurmctld, slurmdbd, mariadbd (by
# their pid files) and the shared munged when no other test cluster uses it,
# then ends any leftover job process of this cluster (processes whose
# environment carries this cluster's SLURM_CONF). Idempotent.
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

# Processes that belong to this cluster's jobs: slurmstepd of this cluster and
# job tasks (SLURM_JOB_ID set), both recognised by SLURM_CONF=<this conf> in the
# environment they were started with.  Never this script or its ancestors.
cluster_procs() {
    local p env comm ancestors=" " a=$$
    while [ -n "$a" ] && [ "$a" -gt 1 ]; do
        ancestors+="$a "
        a="$(awk '{print $4}' "/proc/$a/stat" 2>/dev/null)"
    done
    for p in /proc/[0-9]*; do
        p="${p#/proc/}"
        case "$ancestors" in *" $p "*) continue ;; esac
        comm="$(cat "/proc/$p/comm" 2>/dev/null)" || continue
        env="$( { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null )" || continue
        printf '%s\n' "$env" | grep -qxF "SLURM_CONF=$CONF" || continue
        if [ "$comm" = slurmstepd ] || printf '%s\n' "$env" | grep -q '^SLURM_JOB_ID='; then
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
# Jobs are gone, so nothing needs to be flushed in order: stop the Slurm
# daemons together (each takes 1-2 s to exit), then the database.
stop_group 15 "${slurmds[@]}" slurmctld slurmdbd
stop_group 30 mariadbd
# munged (default socket) is shared by all test clusters on this host: drop
# our registration; stop it only if a test cluster started it, no registered
# cluster is left and no slurm daemon at all is running any more.
MUNGE_USERS=/run/munge/sattrib-clusters
MUNGE_PIDFILE=/run/munge/sattrib-munged.pid
rm -f "$MUNGE_USERS/$(printf '%s' "$STATE_DIR" | md5sum | cut -c1-16)"
for f in "$MUNGE_USERS"/*; do        # forget clusters whose state dir is gone
    [ -e "$f" ] || continue
    [ -d "$(cat "$f" 2>/dev/null)/run" ] || rm -f "$f"
done
if [ -r "$MUNGE_PIDFILE" ]; then
    mpid="$(tr -dc '0-9' < "$MUNGE_PIDFILE")"
    users="$(ls -A "$MUNGE_USERS" 2>/dev/null | wc -l)"
    others="$(ps -eo comm= | grep -cxE 'slurmctld|slurmdbd|slurmd' || true)"
    if alive "$mpid" && [ "$(cat "/proc/$mpid/comm" 2>/dev/null)" = munged ]; then
        if [ "$users" -eq 0 ] && [ "${others:-0}" -eq 0 ]; then
            kill -TERM "$mpid"
            for _ in $(seq 50); do alive "$mpid" || break; sleep 0.1; done
            alive "$mpid" && kill -KILL "$mpid"
        else
            log "leaving shared munged running ($users other test cluster(s), $others slurm daemon(s))"
        fi
    fi
fi

# Leftover job processes / slurmstepd of this cluster (by exact SLURM_CONF match).
left="$(cluster_procs || true)"
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
