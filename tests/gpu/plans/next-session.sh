# tests/gpu/plans/next-session.sh - a box_queue.sh plan, ~25 min, for the twenty-second session's
# device time, written by the twenty-first: the gates and full steps its row-op chain
# (serve.row_chain, on since 5db3b25; rows of at most 3,072 elements since the commit after it)
# has not reached. Carry .deps. In order (PLAN_STEPS picks; default all):
#   gates     test_ops (the `row_chain` gates at serve.row_chain 1, where 3,840- and 5,376-wide
#             rows now fall back to the held kernels, and 2, the wide rows' two-slot form written
#             after the device time was spent), test_moe (its `moe_route_lanes` gates: the
#             router's lanes form, also written after the device time, byte for byte) and the
#             pinned replays (one with the chain off, one with the lanes form on), ~3 min
#   ab        the chain off and on, one round: 26B-A4B at 1 and 16 rows, the 31B at one (whose
#             rows keep the held kernels at 1: 0 and 1 should read the same); then 0 against 2
#             (the wide rows' two-slot form, not yet measured) on the 31B at 1 and 16 rows, two
#             rounds, with its prefill line (154 registers a thread at 6,144: one block an SM)
#             ~1.5 min; serve.row_chain's default becomes 2 only on a measured gain; then
#             serve.moe_route_lanes 0 against 1, 26B-A4B at 1 and 16 rows, two rounds (its
#             moe_route line; predicted -0.1 to -0.15 ms at one row), ~40 s
#   full      the full step, 26B-A4B and E4B (the chain at 2,816 and 2,560 through the binary;
#             E2B passed on 5db3b25), ~10 min; then the 31B's and geometry as time goes
#             (whole-suite.sh's PLAN_STEPS="full geometry" has them)
want() { [[ " ${PLAN_STEPS:-gates ab full} " == *" $1 "* ]]; }
want gates && step gates ./build.sh gpu-test test_ops test_moe pinned_composition
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
want ab && step ab bash -c "$(declare -f ab_round); ab_round"
ab_wide() {
    local b rc
    for b in 1 16; do
        for rc in 0 2; do
            echo "== row_chain $rc, gemma4-31b batch $b"
            timeout 120 build/tests/bench_decode -c conf/gemma4-31b.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set serve.row_chain=$rc --batch $b \
                --prompt 1024 --steps 32 | grep -E "^decode step|^prefill|norm|layer_scalar"
        done
    done
}
want ab && step ab-wide bash -c "$(declare -f ab_wide); for r in 1 2; do echo \"-- round \$r\"; ab_wide; done"
ab_route() {
    local b rl
    for b in 1 16; do
        for rl in 0 1; do
            echo "== moe_route_lanes $rl, gemma4-26b-a4b batch $b"
            timeout 100 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set serve.moe_route_lanes=$rl --batch $b --prompt 1024 --steps 32 |
                grep -m3 -E "^decode step|^moe_route"
        done
    done
}
want ab && step ab-route bash -c "$(declare -f ab_route); for r in 1 2; do echo \"-- round \$r\"; ab_route; done"
want full && step full-26b env FULL_MODELS="26b-a4b" ./build.sh gpu-test full
want full && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
