#!/usr/bin/env bash
# tests/gpu/plans/weight-map.sh - one device call for serve.moe_weight_map (the experts' ring with
# its weight rows by tensor copies, kernels/moe.cu), run in the tree itself (carry .deps, and
# .prebuilt when packed):
#   1. the build
#   2. test_moe whole (its moe_weight_map gates: byte for byte against the zero-fill ring at
#      half tiles 2 and 0, the router's ids, every item on one expert, mixed buckets)
#   3. bench_decode, 26B-A4B dummy weights, one 1,024-token prompt at 0 and 1, MAP_ROUNDS
#      (default 3) paired rounds, and 4,096 tokens once each (MAP_LONG=0 skips them): the
#      prefill and its experts' line
#   4. ncu over the first up and down launches at 1, then at 0, with the time that is left
#      (CALL_SECONDS, default 570), with the warps' stall reasons
# Logs under $OUT: build.log, moe.log, ab.log, ncu-map1.txt, ncu-map0.txt.
. tests/gpu/plans/preamble.sh
build_tree "${MAP_REBUILD:-1}"
timeout "${MOE_SECONDS:-150}" build/tests/test_moe > "$OUT/moe.log" 2>&1
count "test_moe" $? "$OUT/moe.log"
grep -E "moe_weight_map" "$OUT/moe.log" | cut -c1-200 | head -6
bench() { # label, then bench_decode's arguments
    echo "== gemma4-26b-a4b $1"
    shift
    timeout 100 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 "$@"
}
{
    for r in $(seq "${MAP_ROUNDS:-3}"); do
        for m in 0 1; do
            bench "prefill 1024, moe_weight_map $m" --set serve.moe_weight_map=$m --batch 1 \
                --prompt 1024 --steps 2
        done
    done
    for m in 0 1; do
        [ "${MAP_LONG:-1}" = 1 ] || break
        bench "prefill 4096, moe_weight_map $m" --set serve.moe_weight_map=$m --batch 1 \
            --prompt 4096 --steps 2
    done
} > "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^experts  " "$OUT/ab.log" | head -40
if command -v ncu > /dev/null; then
    for m in 1 0; do
        [ "$(left)" -gt 40 ] || break
        timeout $(($(left) - 5)) ncu --kernel-name regex:moe_staged --launch-count 2 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats \
            --section SchedulerStats --section InstructionStats --metrics "$NCU_STALLS" \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.moe_weight_map=$m --batch 1 \
            --prompt 1024 --steps 1 > "$OUT/ncu-map$m.txt" 2>&1
        echo "ncu map $m: exit $? at $((SECONDS - t0)) s"
        grep -E "moe_staged|^ +Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Executed Instructions  |stalled_[a-z_]+_per" \
            "$OUT/ncu-map$m.txt" | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -40
    done
fi
echo "done at $((SECONDS - t0)) s"
