#!/usr/bin/env bash
# tests/gpu/plans/weights-a.sh - one device call for serve.moe_weights_a (the experts' ring kernels
# with their weight rows on the mma's A operand, kernels/moe.cu: 1 the down kernel, 2 the up
# kernel too), run in the tree itself (carry .deps, and .prebuilt when packed):
#   1. the build
#   2. test_moe whole (its moe_weights_a gates: byte for byte against the zero-fill ring at half
#      tiles 2 and 0, the router's ids, every item on one expert, mixed buckets, bad ids)
#   3. bench_decode, 26B-A4B dummy weights, one 1,024-token prompt at each of WA_FORMS (default
#      "0 1 2"), WA_ROUNDS (default 3) paired rounds, and 4,096 tokens once each (WA_LONG=0 skips
#      them): the prefill and its experts' line
#   4. the defaults' decode steps on the same card (WA_RECORD=0 skips them): the 26B-A4B at one
#      and 16 rows, 1,024-token context
#   5. the 26B-A4B's full step (bf16) at WA_FULL_AT (default 1), where it beat 0 and more than
#      WA_FULL_MIN (default 430) s of the call are left (CALL_SECONDS, default 570; WA_FULL=0
#      skips it). A call that builds seldom has that left: a second call on the warm box with
#      WA_REBUILD=0 WA_MOE=0 WA_AB=0 WA_RECORD=0 WA_FULL=force runs it alone
#   6. ncu over the first up and down launches at each of WA_NCU_FORMS (default "2 1 0"),
#      with the time that is left, with the warps' stall reasons (WA_NCU=0 skips it)
# Logs under $OUT: build.log, moe.log, ab.log, full.log, ncu-wa2.txt, ncu-wa1.txt, ncu-wa0.txt.
. tests/gpu/plans/preamble.sh
build_tree "${WA_REBUILD:-1}"
if [ "${WA_MOE:-1}" = 1 ]; then
    timeout "${MOE_SECONDS:-150}" build/tests/test_moe > "$OUT/moe.log" 2>&1
    count "test_moe" $? "$OUT/moe.log"
    grep -E "moe_weights_a" "$OUT/moe.log" | cut -c1-200 | head -6
fi
bench() { # label, then bench_decode's arguments
    echo "== gemma4-26b-a4b $1"
    shift
    timeout 100 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 "$@"
}
[ "${WA_AB:-1}" = 1 ] && {
    for r in $(seq "${WA_ROUNDS:-3}"); do
        for f in ${WA_FORMS:-0 1 2}; do
            bench "prefill 1024, moe_weights_a $f" --set serve.moe_weights_a=$f --batch 1 \
                --prompt 1024 --steps 2
        done
    done
    for f in ${WA_FORMS:-0 1 2}; do
        [ "${WA_LONG:-1}" = 1 ] || break
        bench "prefill 4096, moe_weights_a $f" --set serve.moe_weights_a=$f --batch 1 \
            --prompt 4096 --steps 2
    done
    if [ "${WA_RECORD:-1}" = 1 ]; then
        bench "1 row, defaults" --batch 1 --prompt 1024 --steps 64
        bench "16 rows, defaults" --batch 16 --prompt 1024 --steps 64
    fi
} > "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^experts  |^decode step" "$OUT/ab.log" | cut -c1-160 | head -40
# the full step at WA_FULL_AT where its mean 1,024-token prefill beat 0's
at=${WA_FULL_AT:-1}
won=$(awk -v at="$at" '/^== .*prefill 1024, moe_weights_a/ { f = $NF }
    /^prefill: 1024 tokens/ && f != "" { sum[f] += $(NF - 1); n[f]++; f = "" }
    END { print (n[0] && n[at] && sum[at] / n[at] < sum[0] / n[0]) ? 1 : 0 }' "$OUT/ab.log" 2> /dev/null)
[ "${WA_FULL:-1}" = force ] && won=1
echo "moe_weights_a $at faster at 1,024 tokens: $won"
if [ "${WA_FULL:-1}" != 0 ] && [ "$won" = 1 ] && [ "$(left)" -gt "${WA_FULL_MIN:-430}" ]; then
    FULL_MODELS=26b-a4b FULL_POOLS=bf16 FULL_SETS="serve.moe_weights_a=$at" G4_PREBUILT=1 \
        timeout $(($(left) - 10)) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b bf16 (moe_weights_a $at)" $? "$OUT/full.log"
fi
if [ "${WA_NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
    for f in ${WA_NCU_FORMS:-2 1 0}; do
        [ "$(left)" -gt 40 ] || break
        ncu_prefill moe_staged 2 "$OUT/ncu-wa$f.txt" serve.moe_weights_a=$f
    done
fi
echo "done at $((SECONDS - t0)) s"
