#!/usr/bin/env bash
# tests/gpu/box_queue.sh - GPU work longer than one device call (at most 600 s): a plan runs in
# a process session of its own on a copy of the tree and outlives the call that started it;
# each later call waits on it for a while and brings its logs back. A machine stays warm only
# when the next call comes within its idle time (30 s), so the calls follow one another at once,
# with nothing read or decided between them (the sixteenth session lost a plan that way).
#
#   box_queue.sh start PLAN   copies the tree (build outputs and .deps included) to $Q/tree and
#                             starts PLAN there with setsid; returns at once
#   box_queue.sh wait SECS    waits until the plan has ended or SECS have passed, then prints each
#                             finished step's exit status and its gate lines, and tars the logs
#                             into $OUT (on a fresh machine: says there is no plan, exit 1);
#                             every 30 s too. Keep SECS under the call's limit: the device time
#                             left less the machine's start, which took 20-180 s
#
# A plan is a bash file sourced by the runner, with two helpers:
#   step NAME CMD...   runs CMD in the tree copy; log $Q/logs/NAME.log, exit status NAME.rc
#   await NAME...      blocks until those steps have an exit status (for steps run with &)
# Q defaults to /dev/shm/g4queue.
set -u
Q=${Q:-/dev/shm/g4queue}
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1

step() {
    local name=$1 t0=$SECONDS rc
    shift
    echo "$(date +%T) start" > "$Q/logs/$name.time"
    ( cd "$Q/tree" && "$@" ) > "$Q/logs/$name.log" 2>&1
    rc=$?
    echo "$(date +%T) end, $((SECONDS - t0)) s" >> "$Q/logs/$name.time"
    echo "$rc" > "$Q/logs/$name.rc"
    return "$rc"
}
await() {
    local n
    for n in "$@"; do while [ ! -f "$Q/logs/$n.rc" ]; do sleep 2; done; done
}

summary() {
    local f n
    for f in "$Q"/logs/*.time; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .time)
        if [ -f "$Q/logs/$n.rc" ]; then
            echo "-- $n: exit $(cat "$Q/logs/$n.rc") ($(tail -1 "$f"))"
            grep -E "^(PASS|FAIL|SKIP|INFO)|passed.*failed|full_step make" "$Q/logs/$n.log" |
                grep -vE "^(PASS|SKIP)" | cut -c1-300 | tail -${SUMMARY_LINES:-40}
            echo "   $(grep -c '^PASS' "$Q/logs/$n.log") PASS lines"
        else
            echo "-- $n: running since $(head -1 "$f" | cut -d' ' -f1); last line: $(tail -1 "$Q/logs/$n.log" | cut -c1-200)"
        fi
    done
}

# the logs (and the full step's and test programs' outputs) as one archive in $OUT, written
# beside and then moved over the last, so a call cut mid-write still has a whole one
tar_logs() {
    tar czf "$OUT/.queue-logs.tgz" -C "$Q" logs $(cd "$Q" && ls -d tree/build/full tree/build/tests/*.stderr 2>/dev/null) 2>/dev/null
    mv -f "$OUT/.queue-logs.tgz" "$OUT/queue-logs.tgz"
}

case ${1:-} in
start)
    plan=${2:?usage: box_queue.sh start PLAN}
    [ -f "$plan" ] || { echo "no plan $plan"; exit 2; }
    # the box cannot install packages: without .deps (./build.sh deps, carried) the plan's build
    # fails in seconds and the calls that wait on it are spent for nothing
    if [ ! -d .deps ] && ! dpkg -s libinih-dev libjansson-dev > /dev/null 2>&1; then
        echo "no .deps here and libinih-dev/libjansson-dev not installed: run ./build.sh deps and carry .deps"
        exit 2
    fi
    # tmpfs defaults to half the RAM: a 31B checkpoint (62 GB) needs more
    mount -o remount,size=110G /dev/shm 2>/dev/null || echo "remount of /dev/shm refused"
    if [ -f "$Q/running" ]; then echo "a plan is running already: $(cat "$Q/running")"; exit 0; fi
    rm -rf "$Q"; mkdir -p "$Q/logs" "$Q/tree"
    tar cf - --exclude=./.git . | tar xf - -C "$Q/tree"
    echo "$plan, started $(date +%T)" > "$Q/running"
    setsid nohup bash -c "Q='$Q'; $(declare -f step await); cd '$Q/tree' && source '$plan';
        echo \"\$(date +%T)\" > '$Q/ended'; rm -f '$Q/running'" > "$Q/logs/plan.out" 2>&1 < /dev/null &
    echo "plan $plan started (pid $!), logs in $Q/logs"
    ;;
wait)
    secs=${2:?usage: box_queue.sh wait SECS}
    [ -d "$Q/logs" ] || { echo "no plan on this machine (a fresh one: the last went back)"; exit 1; }
    t0=$SECONDS
    # the logs go to $OUT every 30 s as well as at the end: a call cut at the device's limit
    # (a wait longer than the session's device time left, after a slow start) still brings back
    # what $OUT holds, where a tar made only at the end is lost with the call (the twenty-eighth
    # session lost a whole call's gates and A/B that way)
    last_tar=$SECONDS
    while [ -f "$Q/running" ] && [ $((SECONDS - t0)) -lt "$secs" ]; do
        sleep 5
        if [ $((SECONDS - last_tar)) -ge 30 ]; then tar_logs; last_tar=$SECONDS; fi
    done
    if [ -f "$Q/running" ]; then echo "== plan still running after $secs s of waiting"
    else echo "== plan ended at $(cat "$Q/ended")"; fi
    summary
    tail -5 "$Q/logs/plan.out"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null
    tar_logs
    true
    ;;
*) echo "usage: box_queue.sh start PLAN | wait SECS" >&2; exit 2 ;;
esac
