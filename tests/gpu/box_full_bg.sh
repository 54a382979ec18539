#!/usr/bin/env bash
# tests/gpu/box_full_bg.sh - the full step of one large model (default the 31B) across two
# device calls: its make alone (HF at 60 layers, every floor, both pools; ~62 GB written to
# /dev/shm) fills most of one call, so the first call starts it and goes on with other work.
#
#   box_full_bg.sh start    begins `full_step.py make` in a process session of its own
#                           (setsid), which outlives the call on a machine that stays warm;
#                           returns at once.
#   box_full_bg.sh finish   waits for that make (BG_WAIT seconds at most), or runs it when the
#                           machine is a fresh one, then `./build.sh gpu-test full` on it (the
#                           check of each pool, alone and all at once).
#
# BG_MODEL (31b), BG_DIR (/dev/shm/g4big: apart from FULL_DIR, whose make empties its folder),
# FULL_POOLS (bf16 fp8). The make's log is $BG_DIR/make-<model>.log.
set -u
mode=${1:?usage: box_full_bg.sh start|finish}
m=${BG_MODEL:-31b}
root=${BG_DIR:-/dev/shm/g4big}
d=$root/$m
log=$root/make-$m.log
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT" "$root"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
making() { pgrep -f "full_step.py make --model $m " >/dev/null; }

case $mode in
start)
    # tmpfs defaults to half the RAM: the 31B's shards need more
    mount -o remount,size=110G /dev/shm 2>/dev/null || echo "remount of /dev/shm refused"
    df -h /dev/shm | tail -1
    if [ -f "$d/reference.json" ] || making; then echo "make $m: already there or running"; exit 0; fi
    setsid nohup python3 tests/full/full_step.py make --model "$m" --dir "$d" \
        --pools "${FULL_POOLS:-bf16 fp8}" >"$log" 2>&1 </dev/null &
    echo "make $m started (pid $!), log $log"
    ;;
finish)
    wait_s=${BG_WAIT:-420}
    t0=$SECONDS
    while [ ! -f "$d/reference.json" ] && making && [ $((SECONDS - t0)) -lt "$wait_s" ]; do sleep 5; done
    echo "make $m: waited $((SECONDS - t0)) s"
    [ -f "$log" ] && grep "full_step make" "$log" | cut -c1-400
    if [ ! -f "$d/reference.json" ] && making; then
        echo "FAIL gpu:full[$m]: the make did not end within $wait_s s"; exit 1
    fi
    FULL_DIR=$root FULL_MODELS=$m ./build.sh gpu-test full
    ;;
*) echo "usage: box_full_bg.sh start|finish" >&2; exit 2 ;;
esac
