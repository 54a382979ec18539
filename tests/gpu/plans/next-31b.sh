# tests/gpu/plans/next-31b.sh - a box_queue.sh plan, ~24 min (carry .deps: the box installs
# nothing, and box_queue.sh refuses to start without it):
#   lane 1: the 31B make (both pools; floors sdpa, batch 2, split-K in two: 594 s on the H200),
#           then its checks: fp8 alone and all at once, bf16 all at once (bf16 alone passed in
#           the fifteenth session, fp8 alone up to 2,049 tokens in the sixteenth)
#   lane 2: the build; test_attn (the folded combine's NaN paths as corrected after their first
#           run); the tiny MoE's training with grouped_mm experts (issue 19's 4 minutes a
#           fixture; the seventeenth session's run died on a missing --out folder)
#   last:   the E4B fp8 case that fails (2,047 tokens; make --lengths now draws the standard
#           set's prompt): HF's own GEMM orders split-K in 3, 5, 6, 8 and 16 parts beside the
#           rule's four, and the engine's gap on the same prompt; ncu over the decode attention
#           passes at one row
# Follow `box_queue.sh start` with `wait` calls back to back: a machine idle for 30 s between
# calls goes back with the plan.
. tests/gpu/plans/next-31b-fold.sh --functions-only
lane2() {
    step build ./build.sh tests || { for n in attn train-moe; do echo 1 > "$Q/logs/$n.rc"; done; return; }
    step attn build/tests/test_attn
    step train-moe train_moe
}
lane2 &
if step 31b-make python3 $ft make --model 31b --dir $full/31b --pools "bf16 fp8" \
        --floors "sdpa batch2 splitk"; then
    await train-moe  # the 31B engine sizes its KV pool to the card: nothing beside it
    step 31b-fp8 env FULL_MODELS=31b FULL_POOLS=fp8 ./build.sh gpu-test full
    step 31b-bf16-mixed env FULL_MODELS=31b FULL_POOLS=bf16 FULL_MODES=mixed ./build.sh gpu-test full
fi
await train-moe
rm -rf $full
diag=/dev/shm/g4diag/e4b
step e4b-diag python3 $ft make --model e4b --dir $diag --pools fp8 --lengths 2047 \
    --floors "sdpa batch2 splitk splitk4 splitk3 splitk5 splitk6 splitk8 splitk16"
step e4b-check python3 $ft check --model e4b --dir $diag --binary build/g4pipe \
    --conf conf/gemma4-e4b.ini --pool fp8 --modes alone --log build/full/e4b-diag.stderr
rm -rf /dev/shm/g4diag
step ncu-attn timeout 150 ncu --clock-control none --profile-from-start off \
    --kernel-name regex:attn_split --launch-count 4 --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
    --set serve.max_context=4096 --set serve.cuda_graphs=0 --batch 1 --prompt 1024 --steps 2
