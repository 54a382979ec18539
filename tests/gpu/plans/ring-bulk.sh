#!/usr/bin/env bash
# tests/gpu/plans/ring-bulk.sh - one device call for serve.moe_ring_bulk (the experts' ring
# kernel with its stages filled by bulk copies, 1, and with the weight rows through a tensor
# map, 2; kernels/moe.cu), run in the tree itself (carry .deps, and .prebuilt when packed):
#   1. the build (~180 s on the box; less with objects packed here by tests/gpu/prebuilt.sh)
#   2. test_moe whole (its moe_ring_bulk gates, both forms: byte for byte against the cp.async
#      ring, the router's ids and every item on one expert, bad ids included)
#   3. bench_decode, 26B-A4B dummy weights, one prompt of 1,024 tokens, bulk 0 / 1 / 2
#      (BULK_FORMS), three rounds, and 4,096 tokens once each: the prefill and the experts' line
#   4. ncu over each form's first up and down launches (BULK_NCU=0 skips it)
#   5. the 26B-A4B's full step (bf16) with BULK_FULL_FORM (default 1) on, as long as the call
#      lasts (CALL_SECONDS, default 570; BULK_FULL=0 skips it)
# Logs under $OUT: build.log, moe.log, ab.log, ncu-bulk1.txt, ncu-bulk2.txt, full.log.
. tests/gpu/plans/preamble.sh
build_tree "${BULK_REBUILD:-1}"
timeout ${MOE_SECONDS:-150} build/tests/test_moe > "$OUT/moe.log" 2>&1
count "test_moe" $? "$OUT/moe.log"
grep -E "moe_ring_bulk" "$OUT/moe.log" | cut -c1-200 | head -8
bench() { # $1 prompt tokens, $2 moe_ring_bulk
    echo "== gemma4-26b-a4b prefill $1, moe_ring_bulk $2"
    timeout 100 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 --set serve.moe_ring_bulk="$2" --batch 1 --prompt "$1" \
        --steps 2
}
forms=${BULK_FORMS:-0 1 2}
for r in 1 2 3; do
    for b in $forms; do bench 1024 $b; done
done > "$OUT/ab.log" 2>&1
for b in $forms; do bench 4096 $b; done >> "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^experts  " "$OUT/ab.log" | head -60
if command -v ncu >/dev/null && [ "${BULK_NCU:-1}" = 1 ]; then
    for b in ${BULK_NCU_FORMS:-1 2}; do
        timeout 100 ncu --kernel-name regex:moe_staged --launch-count 2 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats \
            --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.moe_ring_bulk=$b --batch 1 --prompt 1024 \
            --steps 1 > "$OUT/ncu-bulk$b.txt" 2>&1
        echo "ncu bulk $b: exit $? at $((SECONDS - t0)) s"
        grep -E "moe_staged|^ +Duration|DRAM Throughput|Issue Slots Busy|Executed Instructions  |Registers Per" \
            "$OUT/ncu-bulk$b.txt" | head -20
    done
fi
if [ "${BULK_FULL:-1}" = 1 ] && [ "$(left)" -gt 300 ]; then
    FULL_MODELS=26b-a4b FULL_POOLS="${BULK_POOLS:-bf16}" FULL_SETS="serve.moe_ring_bulk=${BULK_FULL_FORM:-1}" \
        G4_PREBUILT=1 timeout $(( $(left) - 15 )) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b ${BULK_POOLS:-bf16} (moe_ring_bulk ${BULK_FULL_FORM:-1})" $? "$OUT/full.log"
fi
echo "done at $((SECONDS - t0)) s"
