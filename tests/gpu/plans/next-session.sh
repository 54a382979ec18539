# tests/gpu/plans/next-session.sh - a box_queue.sh plan for the twenty-fourth session's device
# time, written by the twenty-third (carry .deps; follow `start` with `wait` calls back to back:
# a machine idle for 30 s goes back with the plan). PLAN_STEPS picks; default "early e2b e4b
# 26b", in order:
#   early  serve.early_weights (written after the device time was spent, off): its gates
#          (test_gemm_lt's gemm_early_weights, the group and invariance gates with it on, the
#          pinned replay with it on), then bench_decode 0 against 1, 26B-A4B at 1 and 16 rows,
#          two rounds (predicted -0.1 to -0.15 ms at one row: ~1 us of each of ~150 projection
#          calls, the first weight round trip overlapping the producer; 16 rows unchanged: the
#          lo form takes at most 8 rows), ~5 min; the default flips only on a measured gain
#   e2b    the E2B's full step on this session's defaults (wide_loads on, row_chain 3), ~4 min
#   e4b    the E4B's, ~5 min (issue 18's two fp8 cases at 2,047 tokens expected, nothing else)
#   26b    the 26B-A4B's, ~10 min (not run since 0a7f15d)
#   31b    the 31B's, ~20 min with its make: a session's call of its own (PLAN_STEPS=31b)
#   t31    (not in the default) the 31B's graphed timeline at one row, ~3 min: the trace build
#          now stamps each cuBLASLt call, so its projections get their own lines
want() { [[ " ${PLAN_STEPS:-early e2b e4b 26b} " == *" $1 "* ]]; }
want early && step early-gates ./build.sh gpu-test test_gemm_lt pinned_composition
early_ab() {
    local b ew
    for b in 1 16; do
        for ew in 0 1; do
            echo "== early_weights $ew, gemma4-26b-a4b batch $b"
            timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set serve.early_weights=$ew --batch $b --prompt 1024 --steps 32 |
                grep -E "^decode step|_proj"
        done
    done
}
want early && step early-ab bash -c "$(declare -f early_ab); for r in 1 2; do echo \"-- round \$r\"; early_ab; done"
want e2b && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
want 26b && step full-26b env FULL_MODELS="26b-a4b" ./build.sh gpu-test full
want 31b && step full-31b env FULL_MODELS=31b ./build.sh gpu-test full
want t31 && step t31-trace-build ./build.sh trace
want t31 && step t31-trace bash -c "timeout 150 build/trace/tests/bench_decode -c conf/gemma4-31b.ini \
    --set model.weights=dummy --set serve.max_context=4096 --batch 1 --prompt 1024 --steps 32 \
    --trace 16 | sed -n '2p;/^kernel trace/,\$p'"
