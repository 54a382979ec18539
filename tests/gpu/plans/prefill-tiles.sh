# tests/gpu/plans/prefill-tiles.sh - a box_queue.sh plan, ~6 min: serve.moe_prefill_tiles (the
# prefill experts with 4 item tiles a warp, nineteenth session, not yet run) gated and measured.
#   gates:  test_moe (its `moe_prefill_tiles` gates, byte for byte) and the pinned replays (one
#           with the switch on)
#   ab:     bench_decode's prefill of the 26B-A4B (the only model with experts),
#           1 and 16 prompts of 1,024 tokens, the switch off and on alternating, two rounds; the
#           experts' line of the prefill breakdown beside the wall time
step gates ./build.sh gpu-test test_moe pinned_composition
ab_round() {
    local b t
    for b in 1 16; do
        for t in 0 1; do
            echo "== moe_prefill_tiles $t, $b prompts"
            timeout 150 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set serve.moe_prefill_tiles=$t --batch $b --prompt 1024 --steps 4 |
                grep -E "^prefill:|^experts "
        done
    done
}
step ab bash -c "$(declare -f ab_round); for r in 1 2; do echo \"-- round \$r\"; ab_round; done"
