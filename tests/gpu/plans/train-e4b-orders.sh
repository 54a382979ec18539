# tests/gpu/plans/train-e4b-orders.sh - a box_queue.sh plan, ~7 min (carry .deps):
#   the tiny MoE's training with grouped_mm experts, alone on the GPU (issue 19's 4 minutes a
#   fixture; the eighteenth session's first try ran out of memory beside the 31B make), cut at
#   280 s: its log prints the step rate every 100 steps either way; the binary builds beside it
#   at nice 19
#   then the E4B fp8 case that fails (2,047 tokens, gap 0.734 against a limit of 0.633) under
#   each projection kernel choice (debug.gemm auto, cublaslt, mma): the engine's own spread over
#   GEMM orders, to set beside HF's (split-K in 2..16 parts: 0.156-0.317)
. tests/gpu/plans/next-31b-fold.sh --functions-only
mkdir -p build/full
step bin nice -n 19 ./build.sh &
export TRAIN_TIMEOUT=280
step train-moe train_moe
await bin
diag=/dev/shm/g4diag/e4b
step e4b-make python3 $ft make --model e4b --dir $diag --pools fp8 --lengths 2047 \
    --floors "sdpa splitk splitk4"
for g in auto cublaslt mma; do
    step e4b-$g python3 $ft check --model e4b --dir $diag --binary build/g4pipe \
        --conf conf/gemma4-e4b.ini --pool fp8 --modes alone --set debug.gemm=$g \
        --label /$g --table build/full/e4b-orders.jsonl --log build/full/e4b-$g.stderr
done
cp build/full/e4b-orders.jsonl "$Q/logs/" 2>/dev/null
rm -rf /dev/shm/g4diag
