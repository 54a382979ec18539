# tests/gpu/plans/preamble.sh - sourced by a plan script run in the tree's root on the device
# box: strict variables, $OUT (or /tmp/g4pipe-out) made, CUDA on the paths, t0 the call's start,
# left, the seconds the call may still use, count LABEL EXIT LOG, a gate log's one-line
# summary and its first failures, build_tree, and NCU_STALLS, ncu's --metrics list of the
# warps' stall reasons a issued instruction (what binds a latency-bound kernel).
set -u
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
t0=$SECONDS
# the seconds a call may still use (CALL_SECONDS, default 570, of the call's 600)
budget=${CALL_SECONDS:-570}
left() { echo $((budget - (SECONDS - t0))); }
count() {
    echo "$1: exit $2 at $((SECONDS - t0)) s: $(grep -c '^PASS' "$3") PASS, $(grep -c '^FAIL' "$3") FAIL, $(grep -c '^SKIP' "$3") SKIP"
    grep '^FAIL' "$3" | cut -c1-300 | head -10
}
# build_tree REBUILD: objects packed here unpacked (tests/gpu/prebuilt.sh), then ./build.sh tests
# into $OUT/build.log, or none where REBUILD is 0 and the warm box holds an earlier build; a
# failed build ends the plan
build_tree() {
    [ -f .prebuilt/objs.tar.xz ] && bash tests/gpu/prebuilt.sh unpack
    if [ -x build/tests/bench_decode ] && [ "${1:-1}" = 0 ]; then
        echo "the box's earlier build" > "$OUT/build.log"
    else
        ./build.sh tests > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
    fi
    echo "build: $((SECONDS - t0)) s"
}
NCU_STALLS=""
for reason in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait \
    not_selected dispatch_stall lg_throttle no_instruction branch_resolving; do
    NCU_STALLS="$NCU_STALLS${NCU_STALLS:+,}smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio"
done
