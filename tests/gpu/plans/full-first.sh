# tests/gpu/plans/full-first.sh - a box_queue.sh plan (carry .deps and .prebuilt; run
# tests/gpu/prebuilt.sh unpack before `box_queue.sh start`): the thirty-seventh session's first
# device time. The full step had not run since serve.attn_strided_tiles went on (the thirty-sixth
# session), and test_attn's flash gates and its strided row-chunk case had never run.
#   build      ./build.sh tests (the attention object carried: prebuilt.sh pack
#              kernels_attn_mma.cu.o)
#   attn       the whole test_attn, beside the full step (a few hundred MB of the card)
#   full-26b   the 26B-A4B's full step, fp8 pool then bf16, this tree's defaults (the checkpoint
#              and HF references made first on a card under 100 GB)
#   full-pe    the same checkpoint with serve.prompt_experts on (the H100's 32,752-token bf16
#              prompt failed with it on in the thirty-fifth session: the card's or the path's?)
#   pf         bench_decode, one 26B-A4B prompt of 1,024 and of 2,048 tokens, the whole per-op
#              breakdown of the last chunk, defaults / prompt experts on / flash on, two rounds
step build ./build.sh tests || return 0
step attn ./build.sh gpu-test test_attn &
step full-26b env FULL_MODELS="26b-a4b" FULL_POOLS="fp8 bf16" ./build.sh gpu-test full
step full-pe env FULL_MODELS="26b-a4b" FULL_POOLS="bf16 fp8" \
    FULL_SETS="serve.prompt_experts=1" ./build.sh gpu-test full
await attn
pf() {
    local r p v
    for r in 1 2; do
        for p in 1024 2048; do
            for v in defaults serve.prompt_experts=1 serve.attn_flash=1; do
                echo "== prefill $p, $v, round $r"
                set --
                [ $v = defaults ] || set -- --set "$v"
                timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                    --set model.weights=dummy --set serve.max_context=4096 "$@" --batch 1 \
                    --prompt $p --steps 2
            done
        done
    done
}
step pf bash -c "$(declare -f pf); pf"
