# tests/gpu/plans/attn-latency.sh - a box_queue.sh plan, ~9 min: the attention passes' latency
# chains cut (twentieth session; bit-identical by construction) gated and measured against the
# tree before them. Carry .deps and .prev, the baseline tree as
# `git archive <before> | gzip > .prev/src.tgz`.
#   builds:  this tree's and the baseline's tests, side by side
#   ab:      bench_decode, 26B-A4B at 1 and 16 rows and the 31B at one, this tree and the
#            baseline alternating, two rounds: the graphed step's median and the ungraphed
#            breakdown's attention line
#   pinned:  the GPU pinned recordings replayed byte for byte (the bits did not move)
#   attn:    test_attn, every attention gate against the CPU twin (~4 min)
mkdir -p .prev/src && tar xzf .prev/src.tgz -C .prev/src && cp -r .deps .prev/src/
step prev-build bash -c 'cd .prev/src && ./build.sh tests' &
step now-build ./build.sh tests
await prev-build
ab_round() {
    local mb m b tr dir
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1; do
        m=${mb%:*} b=${mb#*:}
        for tr in now prev; do
            dir=.
            [ $tr = prev ] && dir=.prev/src
            echo "== $tr $m batch $b"
            (cd $dir && timeout 100 build/tests/bench_decode -c conf/$m.ini \
                --set model.weights=dummy --set serve.max_context=4096 --batch $b \
                --prompt 1024 --steps 32 | grep -m2 -E "^decode step|^attention ")
        done
    done
}
step ab bash -c "$(declare -f ab_round); for r in 1 2; do echo \"-- round \$r\"; ab_round; done"
step pinned ./build.sh gpu-test pinned_composition
step attn ./build.sh gpu-test test_attn
step full env FULL_MODELS=26b-a4b ./build.sh gpu-test full
