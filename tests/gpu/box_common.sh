# tests/gpu/box_common.sh - sourced by the device-call scripts (box_quick.sh, box_parallel.sh):
# $OUT and the DEADLINE clock (seconds from the start), stamp/left, and pack_logs, which turns
# everything under $OUT into one archive (the device tool brings back at most 8 files).
OUT=${OUT:-/tmp/g4pipe-out}
DEADLINE=${DEADLINE:-540}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "== $1 (+$(($(date +%s) - t0)) s)"; }
left() { echo $((DEADLINE - ($(date +%s) - t0))); }
pack_logs() {
    stamp done
    [ "${BOX_NO_PACK:-0}" = 1 ] && return # a stream inside another call's $OUT: the caller packs
    (cd "$OUT" && tar czf /tmp/box-logs.tgz --exclude box-logs.tgz . && find . -mindepth 1 -delete &&
        mv /tmp/box-logs.tgz "$OUT/")
}
