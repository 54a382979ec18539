#!/usr/bin/env bash
# tests/gpu/plans/item-frags.sh - one device call for serve.moe_item_frags (the experts' ring with
# its item rows in the mma's fragment order, kernels/moe.cu), run in the tree itself (carry .deps,
# and .prebuilt when packed):
#   1. the build
#   2. test_moe whole (its moe_item_frags gates: byte for byte against the zero-fill ring at half
#      tiles 2 and 0, the router's ids, every item on one expert, mixed buckets)
#   3. bench_decode, 26B-A4B dummy weights, one 1,024-token prompt at 0 and 1, FRAG_ROUNDS
#      (default 3) paired rounds, and 4,096 tokens once each (FRAG_LONG=0 skips them): the
#      prefill and its experts' line
#   4. the 26B-A4B's full step (bf16) with it on, where it won and more than FRAG_FULL_MIN
#      (default 430) s of the call are left (CALL_SECONDS, default 570; FRAG_FULL=0 skips it).
#      A call that builds seldom has that left: a second call on the warm box with
#      FRAG_REBUILD=0 FRAG_MOE=0 FRAG_AB=0 FRAG_FULL=force runs it alone
#   5. ncu over the first up and down launches at 1, then at 0, with the time that is left,
#      with the warps' stall reasons (FRAG_NCU=0 skips it)
# Logs under $OUT: build.log, moe.log, ab.log, full.log, ncu-frags1.txt, ncu-frags0.txt.
. tests/gpu/plans/preamble.sh
build_tree "${FRAG_REBUILD:-1}"
if [ "${FRAG_MOE:-1}" = 1 ]; then
    timeout "${MOE_SECONDS:-150}" build/tests/test_moe > "$OUT/moe.log" 2>&1
    count "test_moe" $? "$OUT/moe.log"
    grep -E "moe_item_frags" "$OUT/moe.log" | cut -c1-200 | head -6
fi
bench() { # label, then bench_decode's arguments
    echo "== gemma4-26b-a4b $1"
    shift
    timeout 100 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 "$@"
}
[ "${FRAG_AB:-1}" = 1 ] && {
    for r in $(seq "${FRAG_ROUNDS:-3}"); do
        for f in 0 1; do
            bench "prefill 1024, moe_item_frags $f" --set serve.moe_item_frags=$f --batch 1 \
                --prompt 1024 --steps 2
        done
    done
    for f in 0 1; do
        [ "${FRAG_LONG:-1}" = 1 ] || break
        bench "prefill 4096, moe_item_frags $f" --set serve.moe_item_frags=$f --batch 1 \
            --prompt 4096 --steps 2
    done
} > "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^experts  " "$OUT/ab.log" | head -40
# the full step where 1's mean 1,024-token prefill beat 0's
won=$(awk '/^== .*prefill 1024, moe_item_frags/ { f = $NF }
    /^prefill: 1024 tokens/ && f != "" { sum[f] += $(NF - 1); n[f]++; f = "" }
    END { print (n[0] && n[1] && sum[1] / n[1] < sum[0] / n[0]) ? 1 : 0 }' "$OUT/ab.log" 2> /dev/null)
[ "${FRAG_FULL:-1}" = force ] && won=1
echo "moe_item_frags 1 faster at 1,024 tokens: $won"
if [ "${FRAG_FULL:-1}" != 0 ] && [ "$won" = 1 ] && [ "$(left)" -gt "${FRAG_FULL_MIN:-430}" ]; then
    FULL_MODELS=26b-a4b FULL_POOLS=bf16 FULL_SETS="serve.moe_item_frags=1" G4_PREBUILT=1 \
        timeout $(($(left) - 10)) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b bf16 (moe_item_frags 1)" $? "$OUT/full.log"
fi
if [ "${FRAG_NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
    for f in 1 0; do
        [ "$(left)" -gt 40 ] || break
        ncu_prefill moe_staged 2 "$OUT/ncu-frags$f.txt" serve.moe_item_frags=$f
    done
fi
echo "done at $((SECONDS - t0)) s"
