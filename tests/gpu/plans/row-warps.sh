#!/usr/bin/env bash
# tests/gpu/plans/row-warps.sh - one device call for serve.row_warps (prompt-sized row-op groups
# a warp a row with 16-byte loads; kernels/norm.cu), run in the tree itself (carry .deps, and
# .prebuilt when packed):
#   1. the build (~115-140 s with objects packed here by tests/gpu/prebuilt.sh)
#   2. test_ops whole (its row_warps gates: every byte against the separate launches, the path
#      each case must take, row 0 alone through the chain)
#   3. bench_decode, 26B-A4B dummy weights, one prompt of 1,024 tokens, row_warps 0 / 1,
#      WARPS_ROUNDS (default 3) paired rounds, and 4,096 tokens once each: the prefill and its
#      per-op breakdown (the three row-op groups a layer)
#   4. the 26B-A4B's full step (bf16) with row_warps on, when it measured faster and more than
#      300 s of the call are left (CALL_SECONDS, default 570; WARPS_FULL=0 skips it)
# Logs under $OUT: build.log, ops.log, ab.log, full.log.
. tests/gpu/plans/preamble.sh
build_tree "${WARPS_REBUILD:-1}"
timeout "${OPS_SECONDS:-150}" build/tests/test_ops > "$OUT/ops.log" 2>&1
count "test_ops" $? "$OUT/ops.log"
grep -E "row_warps" "$OUT/ops.log" | grep -c "^PASS" | sed 's/^/row_warps gates passed: /'
bench() { # prompt tokens, row_warps
    echo "== gemma4-26b-a4b prefill $1, row_warps $2"
    timeout 100 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 --set serve.row_warps="$2" --batch 1 --prompt "$1" --steps 2
}
{
    for r in $(seq "${WARPS_ROUNDS:-3}"); do
        for w in 0 1; do bench 1024 $w; done
    done
    for w in 0 1; do bench 4096 $w; done
} > "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^post_attn_norm|^post_ff_norm" "$OUT/ab.log" | cut -c1-120 | head -60
faster=$(awk '/^== .*prefill 1024, row_warps/ { w = $NF }
    /^prefill: 1024 tokens/ && w != "" { sum[w] += $(NF - 1); n[w]++; w = "" }
    END { print (n[0] && n[1] && sum[1] / n[1] < sum[0] / n[0]) ? 1 : 0 }' "$OUT/ab.log")
echo "row_warps faster at 1,024 tokens: $faster"
if [ "${WARPS_FULL:-1}" = 1 ] && [ "$faster" = 1 ] && [ "$(left)" -gt 300 ]; then
    FULL_MODELS=26b-a4b FULL_POOLS=bf16 FULL_SETS="serve.row_warps=1" \
        G4_PREBUILT=1 timeout $(($(left) - 10)) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b bf16 (row_warps 1)" $? "$OUT/full.log"
fi
echo "done at $((SECONDS - t0)) s"
