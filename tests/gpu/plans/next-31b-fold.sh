# tests/gpu/plans/next-31b-fold.sh - a box_queue.sh plan, ~23 min:
#   lane 1: the 31B make (both pools; floors sdpa, batch 2, split-K in two: 594 s on the H200),
#           then its checks: fp8 alone and all at once, bf16 all at once (bf16 alone passed in
#           the fifteenth session, fp8 alone up to 2,049 tokens in the sixteenth)
#   lane 2: the build; the experts' GeLU now kernels/bf16.cuh's k_gelu_tanh (issue 20): test_moe
#           and a new GPU pinned recording, brought back in the logs (logs/pinned/) with its
#           line count against the old one; serve.attn_fold's op gates (with the folded
#           combine's NaN paths) and the recording replayed with it on; the pinned step as the
#           suite runs it; the trained gates on this tree (issue 19); the tiny MoE's training
#           with grouped_mm experts (issue 19's time budget); all beside the 31B make (small
#           GPU memory)
#   last:   the GPU start-up faults and soak (issue 23's device-memory case); the E4B fp8
#           diagnosis at 2,047 tokens (HF's own GEMM orders beyond the rule's four: split-K in
#           3, 5, 6, 8 and 16 parts, printed by the make, never in the rule; ~1 min), then the
#           fold's speed, off against on, one 26B-A4B row and 16, twice each, and ncu over the
#           decode attention passes at one row
# Follow `box_queue.sh start` with `wait` calls back to back: a machine idle for 30 s between
# calls goes back with the plan (the sixteenth session lost its 31B checks that way).
full=/dev/shm/g4full
ft=tests/full/full_step.py
mkdir -p build/full
train_moe() {
    timeout ${TRAIN_TIMEOUT:-420} python3 tests/fixtures/train_fixtures.py --out /dev/shm/g4train --only tiny-moe
    local f
    for f in /dev/shm/g4train/trained-tiny-moe tests/fixtures/trained-tiny-moe; do
        python3 - "$f/meta.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
t, h = m["training"], m["hf_figures"]
print(f"INFO train-moe {sys.argv[1]}: {m['seconds']} s in all, training {t['seconds']} s with "
      f"{t['experts_implementation']}, loss last 50 {t['loss_last50_mean']}, held-out CE eager "
      f"{h['ce_eager']}, top-1 sdpa {h['top1_sdpa_vs_eager']}, greedy margin median "
      f"{h['greedy_margin_median']}")
PY
    done
}
# the GPU pinned recording made again on this tree (the experts' GeLU moved to k_gelu_tanh,
# which rounds where ref_gelu_tanh does), then replayed from the tree's tests/pinned/
record_pinned() {
    local old=tests/pinned/gpu-tiny-moe.jsonl new=$Q/logs/pinned/gpu-tiny-moe.jsonl
    mkdir -p "$Q/logs/pinned"
    BUILD_DIR=build python3 tests/proto/test_pinned.py --backend gpu --record "$Q/logs/pinned" ||
        return 1
    echo "INFO pinned-record: $(diff "$old" "$new" | grep -c '^>') of $(wc -l < "$new") lines" \
        "differ from the committed recording"
    cp "$new" "$old"
}
moe_gelu() {
    build/tests/test_moe
    local rc=$?
    record_pinned || return 1
    return $rc
}
lane2() {
    step build ./build.sh tests || {
        for n in moe-gelu attn-fold pinned trained train-moe; do echo 1 > "$Q/logs/$n.rc"; done
        return
    }
    step moe-gelu moe_gelu
    step attn-fold bash -c 'build/tests/test_attn; BUILD_DIR=build PINNED_SET=serve.attn_fold=1 \
        python3 tests/proto/test_pinned.py --backend gpu'
    step pinned ./build.sh gpu-test pinned_composition
    step trained ./build.sh gpu-test trained
    # issue 19: the tiny MoE's training with grouped_mm experts (431 s with the plain loop; the
    # budget is 240 s a fixture): its time and held-out loss beside the committed fixture's
    step train-moe train_moe
}
bench_fold() {
    local b f
    for b in 1 16; do for f in 0 1 0 1; do
        echo "attn_fold=$f batch $b: $(timeout 60 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
            --set model.weights=dummy --set serve.max_context=4096 --set serve.attn_fold=$f \
            --batch $b --prompt 1024 --steps 16 2>&1 | grep -v "^g4pipe: " | head -3 | tr '\n' ' ')"
    done; done
}
[ "${1:-}" = --functions-only ] && return 0
lane2 &
if step 31b-make python3 $ft make --model 31b --dir $full/31b --pools "bf16 fp8" \
        --floors "sdpa batch2 splitk"; then
    await train-moe  # the 31B engine sizes its KV pool to the card: nothing beside it
    step 31b-fp8 env FULL_MODELS=31b FULL_POOLS=fp8 ./build.sh gpu-test full
    step 31b-bf16-mixed env FULL_MODELS=31b FULL_POOLS=bf16 FULL_MODES=mixed ./build.sh gpu-test full
fi
await train-moe
rm -rf $full
# issue 23's last case: a KV budget the device cannot hold (startup_fault[kv_budget_over_device_
# memory]), with the soak again (~80 s; the 26B-A4B's engine needs the card the 31B had)
step reliability ./build.sh gpu-test reliability
step e4b-diag python3 $ft make --model e4b --dir /dev/shm/g4diag/e4b --pools fp8 \
    --lengths 2047 --floors "sdpa batch2 splitk splitk4 splitk3 splitk5 splitk6 splitk8 splitk16"
rm -rf /dev/shm/g4diag
step bench-fold bench_fold
# what bounds the decode attention passes (perf-notes "Next H200 calls" D) before they are
# reshaped: one 26B-A4B row, ungraphed, the stats and P.V passes of the first two (sliding) layers
step ncu-attn timeout 150 ncu --clock-control none --profile-from-start off \
    --kernel-name regex:attn_split --launch-count 4 --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
    --set serve.max_context=4096 --set serve.cuda_graphs=0 --batch 1 --prompt 1024 --steps 2
