#!/usr/bin/env bash
# tests/gpu/plans/h200-record.sh - one device call for the H200 readings the log owes (the
# forty-fourth and forty-fifth sessions ran on H100s or got no machine), run in the tree itself
# (carry .deps, and .prebuilt when packed), best right after another plan on the same warm box:
#   1. the build, unless the box still holds one (REC_REBUILD=0 keeps it)
#   1b. test_ops whole (REC_OPS=1; off by default): the forty-seventh session's GeGLU cases (the
#      16-byte form at 1,024 and 64 rows) have not run on a GPU yet
#   2. bench_decode, dummy weights, the defaults (REC_SETS adds --set pairs to every run): the
#      26B-A4B one row and 16 rows (1,024-token context, bf16 and fp8 pools), one 1,024-token
#      prompt and one of 4,096 tokens (two rounds), the 31B one row and one 1,024-token prompt
#   3. the 26B-A4B's full step (bf16; REC_POOLS) with the defaults (and REC_SETS), when more than
#      300 s of the call are left (CALL_SECONDS, default 570; REC_FULL=0 skips it). It takes
#      ~300 s, which a call that also builds and reads seldom has left: then a second call on
#      the warm box with REC_REBUILD=0 REC_BENCH=0 runs it alone
#   4. ncu of the experts' ring kernels (the first up and down launches of a 1,024-token 26B-A4B
#      prefill at the defaults; REC_NCU=0 skips it) with the time that is left, each with its
#      warps' stall reasons a issued instruction (what binds a latency-bound kernel)
#   5. the same for the prompt rows' attention and its prep (the first six layers' launches of
#      that prefill: five windowed layers and the first global one; REC_NCU_ATTN=0 skips it)
# Logs under $OUT: build.log, ops.log, bench.log, ncu-experts.txt, ncu-attn.txt, full.log.
. tests/gpu/plans/preamble.sh
build_tree "${REC_REBUILD:-1}"
if [ "${REC_OPS:-0}" = 1 ]; then
    timeout 150 build/tests/test_ops > "$OUT/ops.log" 2>&1
    count "test_ops" $? "$OUT/ops.log"
fi
sets=()
for kv in ${REC_SETS:-}; do sets+=(--set "$kv"); done
bench() { # label, model, then bench_decode's arguments
    local label=$1 model=$2
    shift 2
    echo "== $label"
    timeout 120 build/tests/bench_decode -c "conf/gemma4-$model.ini" --set model.weights=dummy \
        --set serve.max_context=8192 ${sets[@]+"${sets[@]}"} "$@"
}
[ "${REC_BENCH:-1}" = 1 ] && {
    for r in 1 2; do
        bench "26b-a4b bf16 1 row, round $r" 26b-a4b --batch 1 --prompt 1024 --steps 64
        bench "26b-a4b bf16 16 rows, round $r" 26b-a4b --batch 16 --prompt 1024 --steps 64
        bench "26b-a4b fp8 1 row, round $r" 26b-a4b --set kv.local=fp8 --batch 1 \
            --prompt 1024 --steps 64
        bench "26b-a4b prefill 1024, round $r" 26b-a4b --batch 1 --prompt 1024 --steps 2
        bench "26b-a4b prefill 4096, round $r" 26b-a4b --batch 1 --prompt 4096 --steps 2
    done
    bench "31b bf16 1 row" 31b --batch 1 --prompt 1024 --steps 32
    bench "31b prefill 1024" 31b --batch 1 --prompt 1024 --steps 2
} > "$OUT/bench.log" 2>&1
echo "bench: done at $((SECONDS - t0)) s"
grep -E "^==|^decode step|^prefill:|^floor" "$OUT/bench.log" | cut -c1-160 | head -70
if [ "${REC_FULL:-1}" = 1 ] && [ "$(left)" -gt 300 ]; then
    FULL_MODELS=26b-a4b FULL_POOLS="${REC_POOLS:-bf16}" FULL_SETS="${REC_SETS:-}" \
        G4_PREBUILT=1 timeout $(( $(left) - 15 )) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b ${REC_POOLS:-bf16} (${REC_SETS:-defaults})" $? "$OUT/full.log"
fi
# the experts' ring kernels at the defaults (zero-fill, half tiles at 2): what binds them now
if [ "${REC_NCU:-1}" = 1 ] && command -v ncu > /dev/null && [ "$(left)" -gt 50 ]; then
    ncu_prefill moe_staged 2 "$OUT/ncu-experts.txt" ${REC_SETS:-}
fi
if [ "${REC_NCU_ATTN:-1}" = 1 ] && command -v ncu > /dev/null && [ "$(left)" -gt 50 ]; then
    ncu_prefill "attn_prompt|attn_prep_rows" 12 "$OUT/ncu-attn.txt" ${REC_SETS:-}
fi
echo "done at $((SECONDS - t0)) s"
