# tests/gpu/plans/prep-rows.sh - a box_queue.sh plan (carry .deps), the thirty-seventh session's
# second device time: the attention's six parts (kernels/attn_mma_d*.cu) and serve.attn_prep_rows
# (the prep a warp a head, on by default). On an 80 GB H100 test_attn does not fit beside the full
# step's torch make (the first call's test_attn failed its largest cases for memory there), so
# the steps run one after another, the full step last.
#   build    ./build.sh tests (the parts side by side)
#   ab       bench_decode, 26B-A4B dummy weights: attn_prep_rows 0 against 1, a 1,024- and a
#            2,048-token prompt (the chunk's breakdown) and decode steps at 1 and 16 rows, two
#            rounds
#   attn     the whole test_attn: the prep's `attn_prep_rows` gates (both forms bit for bit), the
#            gates' shared setup (one attn_case since this session), the flash gates and the
#            strided tiles' row-chunk case, none of which have run on a GPU
#   full-26b the 26B-A4B's full step, fp8 pool then bf16, this tree's defaults
step build ./build.sh tests || return 0
ab() {
    local r p v b
    for r in 1 2; do
        for v in 0 1; do
            for p in 1024 2048; do
                echo "== prefill $p, attn_prep_rows $v, round $r"
                timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                    --set model.weights=dummy --set serve.max_context=4096 \
                    --set serve.attn_prep_rows=$v --batch 1 --prompt $p --steps 2 |
                    grep -E "^prefill|^attn_prep|^attention "
            done
            for b in 1 16; do
                echo "== decode $b rows, attn_prep_rows $v, round $r"
                timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                    --set model.weights=dummy --set serve.max_context=4096 \
                    --set serve.attn_prep_rows=$v --batch $b --prompt 1024 --steps 64 |
                    grep -E "^decode step|^attn_prep"
            done
        done
    done
}
step ab bash -c "$(declare -f ab); ab"
step attn ./build.sh gpu-test test_attn
step full-26b env FULL_MODELS="26b-a4b" FULL_POOLS="fp8 bf16" ./build.sh gpu-test full
