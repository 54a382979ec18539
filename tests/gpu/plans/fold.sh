# tests/gpu/plans/fold.sh - a box_queue.sh plan, ~10 min, for the twenty-second session's
# standalone norms folded into the row-op groups (codegen: input_norm at the end of the layer
# before, pre_ff_norm_2 into the router group) and the wide chain's third weight slot. Carry
# .deps and .prev (`git archive 5d3b3e8 | gzip > .prev/src.tgz`: the tree before the fold, the
# defaults of this session already in it). In order (PLAN_STEPS picks; default all):
#   gates  test_ops (the new groups of four and three ops, chain against held, byte for byte),
#          test_moe, the fixtures against HF and the trained fixtures (the schedule moved), the
#          pinned replays (the fold moves no bits: the recordings must still match), ~4 min
#   ab     bench_decode, this tree against 5d3b3e8, 26B-A4B and 31B at 1 and 16 rows,
#          alternating, two rounds, ~2 min
#   full   the 26B-A4B's full step (the fold at full depth through the binary), ~6 min
want() { [[ " ${PLAN_STEPS:-gates ab full} " == *" $1 "* ]]; }
if want ab; then
    mkdir -p .prev/src && tar xzf .prev/src.tgz -C .prev/src && cp -r .deps .prev/src/
    step prev-build bash -c 'cd .prev/src && nice -n 10 ./build.sh tests' &
fi
want gates && step gates ./build.sh gpu-test test_ops test_moe engine_vs_hf trained pinned_composition
want gates || step now-build ./build.sh tests
fold_round() {
    local mb m b tr dir
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1 gemma4-31b:16; do
        m=${mb%:*} b=${mb#*:}
        for tr in now prev; do
            dir=.
            [ $tr = prev ] && dir=.prev/src
            echo "== $tr $m batch $b"
            (cd $dir && timeout 120 build/tests/bench_decode -c conf/$m.ini \
                --set model.weights=dummy --set serve.max_context=4096 --batch $b \
                --prompt 1024 --steps 32 | grep -E "^decode step|^prefill|norm|layer_scalar")
        done
    done
}
want ab && await prev-build
want ab && step ab bash -c "$(declare -f fold_round); for r in 1 2; do echo \"-- round \$r\"; fold_round; done"
want full && step full-26b env FULL_MODELS="26b-a4b" ./build.sh gpu-test full
