#!/usr/bin/env bash
# tests/gpu/plans/half-tiles.sh - one device call for serve.moe_half_tiles (the zero-fill ring
# kernels whose blocks of at most 64 items take more outputs: 1 the down kernel's pairs, 2 the up
# kernel's 96 outputs too; kernels/moe.cu), run in the tree itself (carry .deps, and .prebuilt
# when packed):
#   1. the build (~115-140 s with objects packed here by tests/gpu/prebuilt.sh)
#   2. test_moe whole (its moe_half_tiles gates: byte for byte against the zero-fill ring, with
#      the router's ids, every item on one expert, and buckets on both sides of 64 items), and
#      test_ops whole where HALF_OPS=1 (the forty-seventh session's GeGLU cases, not yet run)
#   3. bench_decode, 26B-A4B dummy weights, one prompt of 1,024 tokens at each setting of HALF_AB
#      (default "0 1 2"; the first is the baseline), HALF_ROUNDS (default 3) paired rounds, 4,096
#      tokens once each at the first and last: the prefill and its per-op breakdown
#   4. the card's readings of the defaults (one row and 16 rows, bf16 and fp8, the 31B one row
#      and one 1,024-token prompt), a few seconds each
#   5. the 26B-A4B's full step (bf16) at the fastest setting past the baseline where it beats it
#      (HALF_FULL_SET to choose), when more than HALF_FULL_MIN (default 280) s of the call are
#      left (CALL_SECONDS, default 570; HALF_FULL=0 skips it)
#   6. ncu over the first up and down launches at the last setting and the first, with the
#      time that is left, with the warps' stall reasons
# Logs under $OUT: build.log, moe.log, ops.log, ab.log, rec.log, full.log, ncu-half*.txt.
. tests/gpu/plans/preamble.sh
build_tree "${HALF_REBUILD:-1}"
timeout "${MOE_SECONDS:-150}" build/tests/test_moe > "$OUT/moe.log" 2>&1
count "test_moe" $? "$OUT/moe.log"
grep -E "moe_half_tiles" "$OUT/moe.log" | cut -c1-200 | head -8
if [ "${HALF_OPS:-0}" = 1 ]; then
    timeout 150 build/tests/test_ops > "$OUT/ops.log" 2>&1
    count "test_ops" $? "$OUT/ops.log"
fi
settings=(${HALF_AB:-0 1 2})
bench() { # model, label, then bench_decode's arguments
    local model=$1 label=$2
    shift 2
    echo "== gemma4-$model $label"
    timeout 100 build/tests/bench_decode -c "conf/gemma4-$model.ini" --set model.weights=dummy \
        --set serve.max_context=8192 "$@"
}
{
    for r in $(seq "${HALF_ROUNDS:-3}"); do
        for h in "${settings[@]}"; do
            bench 26b-a4b "prefill 1024, moe_half_tiles $h" --set serve.moe_half_tiles=$h \
                --batch 1 --prompt 1024 --steps 2
        done
    done
    for h in "${settings[0]}" "${settings[-1]}"; do
        bench 26b-a4b "prefill 4096, moe_half_tiles $h" --set serve.moe_half_tiles=$h \
            --batch 1 --prompt 4096 --steps 2
    done
} > "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^experts  " "$OUT/ab.log" | head -40
{
    for r in 1 2; do
        bench 26b-a4b "bf16 1 row, round $r" --batch 1 --prompt 1024 --steps 64
        bench 26b-a4b "bf16 16 rows, round $r" --batch 16 --prompt 1024 --steps 64
        bench 26b-a4b "fp8 1 row, round $r" --set kv.local=fp8 --batch 1 --prompt 1024 --steps 64
    done
    bench 31b "bf16 1 row" --batch 1 --prompt 1024 --steps 32
    bench 31b "prefill 1024" --batch 1 --prompt 1024 --steps 2
} > "$OUT/rec.log" 2>&1
echo "readings: done at $((SECONDS - t0)) s"
grep -E "^==|^decode step|^prefill:" "$OUT/rec.log" | cut -c1-160 | head -40
# the full step's setting: the fastest past the baseline by the 1,024-token rounds' mean
# prefill, where it beats the baseline (HALF_FULL_SET overrides; none: no full step)
pick=$(awk -v base="${settings[0]}" '/^== .*prefill 1024, moe_half_tiles/ { h = $NF }
    /^prefill: 1024 tokens/ && h != "" { sum[h] += $(NF - 1); n[h]++; h = "" }
    END { best = ""; for (x in n) if (x != base && sum[x] / n[x] < sum[base] / n[base] &&
          (best == "" || sum[x] / n[x] < sum[best] / n[best])) best = x; print best }' "$OUT/ab.log")
echo "the faster setting at 1,024 tokens: ${pick:-none past the baseline}"
HALF_FULL_SET=${HALF_FULL_SET:-$pick}
[ -z "$HALF_FULL_SET" ] && HALF_FULL=0
if [ "${HALF_FULL:-1}" = 1 ] && [ "$(left)" -gt "${HALF_FULL_MIN:-280}" ]; then
    FULL_MODELS=26b-a4b FULL_POOLS=bf16 FULL_SETS="serve.moe_half_tiles=$HALF_FULL_SET" \
        G4_PREBUILT=1 timeout $(($(left) - 10)) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b bf16 (moe_half_tiles $HALF_FULL_SET)" $? "$OUT/full.log"
fi
if command -v ncu > /dev/null && [ "$(left)" -gt 50 ]; then
    for h in "${settings[-1]}" "${settings[0]}"; do
        [ "$(left)" -gt 30 ] || break
        ncu_prefill moe_staged 2 "$OUT/ncu-half$h.txt" serve.moe_half_tiles=$h
    done
fi
echo "done at $((SECONDS - t0)) s"
