#!/usr/bin/env bash
# tests/gpu/plans/ring-zfill.sh - one device call for serve.moe_ring_zfill (the experts' ring
# kernel with its copies a fixed count a thread and padding zero-filled by the copy;
# kernels/moe.cu), run in the tree itself (carry .deps, and .prebuilt when packed):
#   1. the build (~180 s on the box; ~115 s with objects packed here by tests/gpu/prebuilt.sh)
#   2. test_moe whole (its moe_ring_zfill gates: byte for byte against the looped ring, the
#      router's ids and every item on one expert, bad ids included)
#   3. bench_decode, 26B-A4B dummy weights, one prompt of 1,024 tokens, zfill 0 / 1, two rounds
#      (ZFILL_ROUNDS), and 4,096 tokens once each: the prefill and its per-op breakdown
#   4. the 26B-A4B's full step (bf16) with zfill on, when more than 290 s of the call are left
#      (CALL_SECONDS, default 570; ZFILL_FULL=0 skips it)
#   5. ncu over zfill's first up and down launches, with the time that is left
# Logs under $OUT: build.log, moe.log, ab.log, full.log, ncu-zfill.txt.
. tests/gpu/plans/preamble.sh
build_tree "${ZFILL_REBUILD:-1}"
timeout "${MOE_SECONDS:-150}" build/tests/test_moe > "$OUT/moe.log" 2>&1
count "test_moe" $? "$OUT/moe.log"
grep -E "moe_ring_zfill" "$OUT/moe.log" | cut -c1-200 | head -4
bench() { # $1 prompt tokens, $2 moe_ring_zfill
    echo "== gemma4-26b-a4b prefill $1, moe_ring_zfill $2"
    timeout 100 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 --set serve.moe_ring_zfill="$2" --batch 1 --prompt "$1" \
        --steps 2
}
for r in $(seq "${ZFILL_ROUNDS:-2}"); do
    for z in 0 1; do bench 1024 $z; done
done > "$OUT/ab.log" 2>&1
for z in 0 1; do bench 4096 $z; done >> "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^experts  " "$OUT/ab.log" | head -40
if [ "${ZFILL_FULL:-1}" = 1 ] && [ "$(left)" -gt "${ZFILL_FULL_MIN:-290}" ]; then
    FULL_MODELS=26b-a4b FULL_POOLS=bf16 FULL_SETS="serve.moe_ring_zfill=1" \
        G4_PREBUILT=1 timeout $(($(left) - 10)) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b bf16 (moe_ring_zfill 1)" $? "$OUT/full.log"
fi
if command -v ncu > /dev/null && [ "$(left)" -gt 50 ]; then
    timeout $(($(left) - 5)) ncu --kernel-name regex:moe_staged --launch-count 2 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section SchedulerStats --section InstructionStats \
        build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=4096 --set serve.moe_ring_zfill=1 --batch 1 --prompt 1024 \
        --steps 1 > "$OUT/ncu-zfill.txt" 2>&1
    echo "ncu zfill: exit $? at $((SECONDS - t0)) s"
    grep -E "moe_staged|^ +Duration|DRAM Throughput|Issue Slots Busy|Executed Instructions  " \
        "$OUT/ncu-zfill.txt" | head -12
fi
echo "done at $((SECONDS - t0)) s"
