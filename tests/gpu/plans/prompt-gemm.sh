# tests/gpu/plans/prompt-gemm.sh - a box_queue.sh plan, written in the thirty-first session for
# serve.prompt_gemm (docs/prompt-rows.md): prompt rows' projections on cuBLASLt held to split-k
# 1, generated rows on the project's kernel. Carry .deps; follow `start` with `wait` calls back
# to back. PLAN_STEPS picks; default every step below, ~25 min over three calls:
#   make    the 26B-A4B's full checkpoint and HF reference (torch, ~5 min), in the background from
#           the start beside the build where the card has over 100 GB (the A/B waits for it),
#           else after the recording
#   gates   test_gemm_lt (the `gemm_prompt` gates: a prompt plan for every 26B-A4B shape, its bits
#           the same at every m and beside generated rows), the engine gates on the tiny fixtures
#           (batch invariance now mixes prompt chunks with generated rows; the graphs' equality)
#           and the trained fixtures' sharp gates, the build included, ~8 min
#   pinned  the GPU recording replayed as committed (expected to differ: prompt rows' bits moved),
#           re-recorded, then replayed at each speed switch's other setting, ~2 min
#   ab      bench_decode, prompt_gemm 0 against 1, two rounds: a 1,024-token prefill of the
#           26B-A4B (predicted 75.3 -> ~63-66 ms) and of the 31B (its prompt rows on plans asked
#           at the chunk), each with its one-row decode step, and the 26B-A4B's 16-row decode step
#           (generated rows: unchanged), ~5 min
#   full    the 26B-A4B's full step, fp8 pool first, after make, ~10 min
#   serve   (not in the default) release/bench.py bf16 against fp8, c = 1, 4, 16, two rounds
want() { [[ " ${PLAN_STEPS:-make gates pinned ab full} " == *" $1 "* ]]; }
make26() {
    step make26 env FULL_DIR=/dev/shm/g4full python3 tests/full/full_step.py make \
        --model 26b-a4b --dir /dev/shm/g4full/26b-a4b --pools "fp8 bf16"
}
# beside the tests only where the card holds both: on an 80 GB H100 the make's torch model left
# the gates no memory (the thirty-first session's first call: 547 failures, every one a plan or
# an engine that could not be made), so there it runs after the A/B and the recording
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
early_make=0
want make && [ "${mib:-0}" -gt 100000 ] && early_make=1
[ $early_make = 1 ] && make26 &
want gates && step gates ./build.sh gpu-test test_gemm_lt engine_vs_hf trained
ab_prompt() {
    local r v m
    [ -f "$Q/logs/make26.time" ] && await make26
    for r in 1 2; do
        echo "-- round $r"
        for m in gemma4-26b-a4b gemma4-31b; do
            for v in 0 1; do
                echo "== $m prefill, prompt_gemm $v"
                timeout 200 build/tests/bench_decode -c conf/$m.ini \
                    --set model.weights=dummy --set serve.max_context=4096 \
                    --set serve.prompt_gemm=$v --batch 1 --prompt 1024 --steps 8 |
                    grep -E "^prefill|^decode step|proj|expert|attention|breakdown"
            done
        done
    done
    for v in 0 1; do
        echo "== gemma4-26b-a4b 16 rows, prompt_gemm $v"
        timeout 150 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
            --set model.weights=dummy --set serve.max_context=4096 \
            --set serve.prompt_gemm=$v --batch 16 --prompt 1024 --steps 32 |
            grep -E "^prefill|^decode step"
    done
}
want ab && step ab ab_prompt
pinned_next() {
    ./build.sh tests >/dev/null 2>&1
    echo "== the committed recording (prompt rows' bits have moved: a difference is expected)"
    BUILD_DIR=build python3 tests/proto/test_pinned.py --backend gpu
    echo "== recorded again"
    BUILD_DIR=build python3 tests/proto/test_pinned.py --backend gpu --record tests/pinned &&
        cp tests/pinned/gpu-tiny-moe.jsonl "$Q/logs/gpu-tiny-moe.jsonl"
    echo "== the speed switches against it"
    ./build.sh gpu-test pinned_composition
}
want pinned && step pinned pinned_next
if want make && [ $early_make = 0 ]; then make26; fi
if want full; then
    [ -f "$Q/logs/make26.time" ] && await make26
    step full-26b env FULL_MODELS="26b-a4b" FULL_POOLS="fp8 bf16" ./build.sh gpu-test full
fi
want serve && step serve python3 release/bench.py -c conf/gemma4-26b-a4b.ini --rounds 2 \
    --a-label bf16 --a-set kv.local=bf16 --b-label fp8 --b-set kv.local=fp8 \
    --out "$Q/logs/serve-results"
