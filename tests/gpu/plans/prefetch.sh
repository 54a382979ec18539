# tests/gpu/plans/prefetch.sh - a box_queue.sh plan (carry .deps; follow `start` with `wait` calls
# back to back): serve.l2_prefetch, written in the twenty-third session, and the full steps that
# serve.wide_loads' new default has not reached. PLAN_STEPS picks; default all, in order:
#   gates  test_gemm_lt (gemm_l2_prefetch, the group and invariance gates with it on), test_attn
#          (the l2_prefetch gates, the NaN paths with it on), the pinned replays (one with it on)
#   ab     bench_decode l2_prefetch 0 against 1: 26B-A4B at 1 and 16 rows in both pools, the 31B
#          at one row, two rounds (predicted -0.3 to -0.6 ms at one 26B-A4B row: the projections'
#          weight streams and attention's key loads start while the kernel before runs)
#   e2b    the E2B's full step (wide_loads on; bits equal with the prefetch on or off)
#   e4b    the E4B's full step (issue 18's two fp8 cases at 2,047 tokens expected to fail)
want() { [[ " ${PLAN_STEPS:-gates ab e2b e4b} " == *" $1 "* ]]; }
want gates && step prefetch-gates ./build.sh gpu-test test_gemm_lt test_attn pinned_composition
prefetch_ab() {
    local mb m b pool pf
    for mb in gemma4-26b-a4b:1:bf16 gemma4-26b-a4b:16:bf16 gemma4-26b-a4b:1:fp8 \
        gemma4-26b-a4b:16:fp8 gemma4-31b:1:bf16; do
        IFS=: read -r m b pool <<< "$mb"
        for pf in 0 1; do
            echo "== l2_prefetch $pf, $m batch $b kv.local $pool"
            timeout 120 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set kv.local=$pool --set serve.l2_prefetch=$pf \
                --batch $b --prompt 1024 --steps 32 |
                grep -E "^decode step|^prefill|^attention|^experts|_proj|moe_"
        done
    done
}
want ab && step prefetch-ab bash -c "$(declare -f prefetch_ab); for r in 1 2; do echo \"-- round \$r\"; prefetch_ab; done"
want e2b && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
