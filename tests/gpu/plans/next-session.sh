# tests/gpu/plans/next-session.sh - a box_queue.sh plan, ~25 min, for the twenty-first session's
# device time, written by the twentieth: what it built after its device time was spent, the
# timeline after its attention change, then the full steps its changes have not reached. Carry
# .deps. In order (PLAN_STEPS picks; default all):
#   gates     test_gemm_lt (its `gemm_weight_prefetch` gates, byte for byte) and the pinned
#             replays (one with serve.weight_prefetch on), ~3 min
#   ab        serve.weight_prefetch off and on alternating, two rounds: 26B-A4B at 1 and 16
#             rows, the 31B at one (bench_decode's graphed step and its ungraphed breakdown's
#             projection lines), ~1 min
#   timeline  the trace build's per-kernel timeline with and without the prefetch, 26B-A4B at
#             1 and 16 rows (tests/gpu/plans/timeline.sh's method), ~3 min with the build
#   ncu       what a row_ops group waits on (perf-notes "Next H200 calls" R): one 26B-A4B row,
#             ungraphed, the first decode step's first groups (the 1,024-token prefill chunk
#             launches 90 before them), stall reasons and source counters, ~2 min
#   full      the full step, 26B-A4B, E2B, E4B (the attention change of 7ffd2db reached only
#             test_attn and the pinned replays), ~12 min; then the 31B's and geometry as time
#             goes (whole-suite.sh's PLAN_STEPS="full geometry" has them)
want() { [[ " ${PLAN_STEPS:-gates ab timeline ncu full} " == *" $1 "* ]]; }
want timeline && step trace-build nice -n 10 ./build.sh trace &
want gates && step gates ./build.sh gpu-test test_gemm_lt pinned_composition
want gates || step now-build ./build.sh tests
ab_round() {
    local mb m b pf
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1; do
        m=${mb%:*} b=${mb#*:}
        for pf in 0 1; do
            echo "== weight_prefetch $pf, $m batch $b"
            timeout 100 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set serve.weight_prefetch=$pf --batch $b \
                --prompt 1024 --steps 32 | grep -m8 -E "^decode step|_proj|^attention "
        done
    done
}
want ab && step ab bash -c "$(declare -f ab_round); for r in 1 2; do echo \"-- round \$r\"; ab_round; done"
trace_pf() {
    local b pf
    for b in 1 16; do
        for pf in 0 1; do
            echo "== 26B-A4B batch $b weight_prefetch $pf"
            timeout 120 build/trace/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set serve.weight_prefetch=$pf --batch $b --prompt 1024 --steps 32 \
                --trace 16 | sed -n '/^kernel trace (16/,$p'
        done
    done
}
want timeline && await trace-build && step timeline bash -c "$(declare -f trace_pf); trace_pf"
want ncu && step ncu-rowops timeout 200 ncu --clock-control none --profile-from-start off \
    --kernel-name regex:row_ops_kernel --launch-skip 90 --launch-count 3 --section SpeedOfLight \
    --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis \
    build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
    --set serve.max_context=4096 --set serve.cuda_graphs=0 --batch 1 --prompt 1024 --steps 2
want full && step full env FULL_MODELS="26b-a4b e2b e4b" ./build.sh gpu-test full
