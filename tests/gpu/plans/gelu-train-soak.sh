# tests/gpu/plans/gelu-train-soak.sh - a box_queue.sh plan, ~15 min, for what next-31b-fold.sh
# could not give (the seventeenth session's first call found no .deps in a fresh checkout: the
# build failed in 7 s and the machine went back with the 31B make under way):
#   lane 1: the build; the experts' GeLU now kernels/bf16.cuh's k_gelu_tanh (issue 20): test_moe
#           and a new GPU pinned recording, brought back in logs/pinned/ with its count of
#           changed lines; serve.attn_fold's op gates (with the folded combine's NaN paths) and
#           the recording replayed with the fold on; the pinned step as the suite runs it; the
#           trained gates on this tree (issue 19); the GPU start-up faults and soak (issue 23)
#   lane 2: after the build, the tiny MoE's training with grouped_mm experts (issue 19's 4
#           minutes a fixture), then the E4B fp8 diagnosis at 2,047 tokens (HF's own GEMM orders
#           split-K in 3, 5, 6, 8 and 16 parts, printed by the make, never in the rule)
#   last:   the fold's speed, off against on, one 26B-A4B row and 16, twice each, alone on the card
# The 31B checks stay in next-31b-fold.sh (one plan of their own: the make alone is 594 s).
ft=tests/full/full_step.py
. tests/gpu/plans/next-31b-fold.sh --functions-only
lane1() {
    step build ./build.sh tests || {
        for n in moe-gelu attn-fold pinned trained reliability train-moe e4b-diag; do
            echo 1 > "$Q/logs/$n.rc"
        done
        return
    }
    step moe-gelu moe_gelu
    step attn-fold bash -c 'build/tests/test_attn; BUILD_DIR=build PINNED_SET=serve.attn_fold=1 \
        python3 tests/proto/test_pinned.py --backend gpu'
    step pinned ./build.sh gpu-test pinned_composition
    step trained ./build.sh gpu-test trained
    step reliability ./build.sh gpu-test reliability
}
lane1 &
while [ ! -f "$Q/logs/build.rc" ]; do sleep 2; done
if [ "$(cat "$Q/logs/build.rc")" = 0 ]; then
    step train-moe train_moe
    step e4b-diag python3 $ft make --model e4b --dir /dev/shm/g4diag/e4b --pools fp8 \
        --lengths 2047 --floors "sdpa batch2 splitk splitk4 splitk3 splitk5 splitk6 splitk8 splitk16"
    rm -rf /dev/shm/g4diag
fi
await reliability e4b-diag
step bench-fold bench_fold
