# tests/gpu/plans/row-chain.sh - a box_queue.sh plan, ~8 min, the twenty-first session's: the
# row-op chain (serve.row_chain, kernels/norm.cu row_chain_kernel). Carry .deps. In order
# (PLAN_STEPS picks; default all):
#   gates     test_ops (its `row_chain` gates and op_vs_ops with the chain, byte for byte against
#             the held kernels) and the pinned replays (one with serve.row_chain off), ~2 min
#   ab        serve.row_chain off and on alternating, two rounds: 26B-A4B at 1 and 16 rows, the
#             31B at one (bench_decode's graphed step, its prefill and its row-op lines), ~1 min
#   timeline  the trace build's per-kernel timeline with the chain off and on, one 26B-A4B row
#   full      the full step of E2B then E4B (the chain at widths 1536 and 2560, through the
#             binary, default config), as the device time lasts
want() { [[ " ${PLAN_STEPS:-gates ab timeline full} " == *" $1 "* ]]; }
want timeline && step trace-build nice -n 10 ./build.sh trace &
want gates && step gates ./build.sh gpu-test test_ops pinned_composition
want gates || step now-build ./build.sh tests
ab_round() {
    local mb m b rc
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1; do
        m=${mb%:*} b=${mb#*:}
        for rc in 0 1; do
            echo "== row_chain $rc, $m batch $b"
            timeout 100 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set serve.row_chain=$rc --batch $b \
                --prompt 1024 --steps 32 | grep -E "^decode step|^prefill|norm|layer_scalar"
        done
    done
}
want ab && step ab bash -c "$(declare -f ab_round); for r in 1 2; do echo \"-- round \$r\"; ab_round; done"
trace_rc() {
    local rc
    for rc in 0 1; do
        echo "== 26B-A4B batch 1 row_chain $rc"
        timeout 120 build/trace/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
            --set model.weights=dummy --set serve.max_context=4096 --set serve.row_chain=$rc \
            --batch 1 --prompt 1024 --steps 32 --trace 16 | sed -n '/^kernel trace (16/,$p'
    done
}
want timeline && await trace-build && step timeline bash -c "$(declare -f trace_rc); trace_rc"
want full && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
want full && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
