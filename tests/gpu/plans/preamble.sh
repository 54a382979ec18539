# tests/gpu/plans/preamble.sh - sourced by a plan script run in the tree's root on the device
# box: strict variables, $OUT (or /tmp/g4pipe-out) made, CUDA on the paths, t0 the call's start,
# left, the seconds the call may still use, count LABEL EXIT LOG, a gate log's one-line
# summary and its first failures, build_tree, NCU_STALLS, ncu's --metrics list of the warps'
# stall reasons a issued instruction (what binds a latency-bound kernel), and ncu_prefill.
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
# ncu_prefill REGEX COUNT LOG SET...: ncu over the first COUNT launches of the kernels REGEX
# names in a 1,024-token 26B-A4B prefill (dummy weights) with the --set pairs SET, into LOG, with
# the warps' stall reasons, and its summary lines; the plan's time that is left bounds it
ncu_prefill() {
    local regex=$1 launches=$2 log=$3 sets=()
    shift 3
    for kv in "$@"; do sets+=(--set "$kv"); done
    timeout $(($(left) - 5)) ncu --kernel-name "regex:$regex" --launch-count "$launches" \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis \
        --metrics "$NCU_STALLS" \
        build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=4096 ${sets[@]+"${sets[@]}"} --batch 1 --prompt 1024 --steps 1 \
        > "$log" 2>&1
    echo "ncu $regex $*: exit $? at $((SECONDS - t0)) s"
    grep -E "$regex|^ +Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Eligible Warps|Executed Instructions  |stalled_[a-z_]+_per" \
        "$log" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -40
}
NCU_STALLS=""
for reason in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait \
    not_selected dispatch_stall lg_throttle no_instruction branch_resolving; do
    NCU_STALLS="$NCU_STALLS${NCU_STALLS:+,}smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio"
done
