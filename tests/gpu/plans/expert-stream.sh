# tests/gpu/plans/expert-stream.sh - a box_queue.sh plan (carry .deps), the thirty-eighth
# session's: serve.expert_stream (kernels/moe_stream.cu; off by default until measured). Its first
# form (both expert projections streamed) ran here and lost (docs/decode-design.md); the form now
# in the tree streams the down projection alone, its first weights copied before it waits for the
# up kernel, and has not run. STREAM_STEPS picks (default "build moe ab pinned"):
#   build    ./build.sh tests
#   moe      test_moe: the `expert_stream` gates (the streamed down kernel against the register
#            one, byte for byte, at 1, 5 and 16 rows, every item on one expert) beside every
#            other, ~8 min
#   ab       bench_decode, 26B-A4B dummy weights, 1,024-token context: expert_stream 0 against 8
#            at one row, 0 against 128 at 4 and 16 rows, two rounds (decode step and the experts'
#            breakdown row); read with tests/gpu/ab_table.py
#   pinned   the GPU pinned replays, serve.expert_stream=128 among them (and the prep's block
#            form, moved into shared helpers after the thirty-seventh session's last GPU run)
#   full     (not in the default) the 26B-A4B's full step with serve.expert_stream=128
#   full-default (not in the default) the same with this tree's defaults
stream_want() { [[ " ${STREAM_STEPS:-build moe ab pinned} " == *" $1 "* ]]; }
stream_want build && { step build ./build.sh tests || return 0; }
stream_want moe && step moe ./build.sh gpu-test test_moe
stream_ab() {
    local r v b
    for r in 1 2; do
        for b in 1 4 16; do
            for v in 0 $([ "$b" = 1 ] && echo 8 || echo 128); do
                echo "== decode $b rows, expert_stream $v, round $r"
                timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                    --set model.weights=dummy --set serve.max_context=4096 \
                    --set serve.expert_stream=$v --batch $b --prompt 1024 --steps 64 |
                    grep -E "^decode step|^experts "
            done
        done
    done
}
stream_want ab && step ab bash -c "$(declare -f stream_ab); stream_ab"
stream_want pinned && step pinned ./build.sh gpu-test pinned_composition
stream_want full && step full-26b env FULL_MODELS="26b-a4b" FULL_POOLS="fp8 bf16" \
    FULL_SETS="serve.expert_stream=128" ./build.sh gpu-test full
#   ncu      (not in the default) ncu over layer 0's and 1's expert kernels of the first decode
#            step at one 26B-A4B row, graphs off, the streamed kernels (expert_stream 8) and the
#            register ones (0): duration, DRAM throughput, stalls, occupancy, ~4 min (graphs off:
#            each kernel alone, so the overlap the second form is for does not show there)
stream_ncu() {
    local v
    for v in 8 0; do
        echo "== ncu, one row, expert_stream $v"
        timeout 200 ncu --clock-control none \
            --kernel-name "regex:moe_up_stream|moe_down_stream|moe_up_mma|moe_down_mma" \
            --launch-skip 0 --launch-count 4 --section SpeedOfLight --section Occupancy \
            --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
            --section SchedulerStats \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.cuda_graphs=0 --set serve.expert_stream=$v \
            --batch 1 --prompt 64 --steps 1
    done
}
stream_want ncu && step ncu bash -c "$(declare -f stream_ncu); stream_ncu"
stream_want full-default && step full-26b env FULL_MODELS="26b-a4b" FULL_POOLS="fp8 bf16" \
    ./build.sh gpu-test full
