#!/usr/bin/env bash
# tests/gpu/plans/narrow-tiles.sh - one device call for serve.moe_narrow_tiles (the prefill
# experts' ring kernel with item tiles of at most 64 items on all 8 warps, kernels/moe.cu) and
# the prompt pass's unrun forms (serve.attn_prompt = 2; head dim 512 at groups 4 and 16), run in
# the tree itself (carry .deps). Steps, each skipped once the call's time (CALL_SECONDS, default
# 575) would run out:
#   1. the build (~180 s on the box; NARROW_REBUILD=0 keeps the box's earlier one)
#   2. test_attn's prompt gates (G4_ATTN_GATES=prompt; head dim 512 at group 16, the 12B's
#      global layers, has never run on a GPU)
#   3. test_moe whole (its moe_prefill_narrow gates: bit-equal to the per-16-item kernels)
#   4. bench_decode, 26B-A4B dummy weights, one prompt of 1,024 tokens (two rounds) and of 2,048
#      (one), narrow 0 against 1 (prefill and the last chunk's experts)
#   5. the same, attn_prompt 0 / 1 / 2 at 1,024 and 4,096 tokens, two rounds (attention by kind)
#   6. ncu over the experts' ring kernels at narrow 0 and 1, then over the prompt pass at form 2
#   7. the 31B at 1,024 tokens, attn_prompt 1 against 2
# Logs under $OUT (or /tmp/g4pipe-out).
. tests/gpu/plans/preamble.sh
budget=${CALL_SECONDS:-575}
room() { [ $((budget - (SECONDS - t0))) -gt "$1" ] || { echo "skipped ($2): $((SECONDS - t0)) s gone"; return 1; }; }
if [ -x build/tests/test_moe ] && [ "${NARROW_REBUILD:-1}" = 0 ]; then
    echo "the box's earlier build" > "$OUT/build.log"
else
    ./build.sh tests > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
fi
echo "build: $((SECONDS - t0)) s"
if room 40 prompt-gates; then
    G4_ATTN_GATES=prompt timeout $((budget - (SECONDS - t0) - 10)) build/tests/test_attn > "$OUT/prompt-gates.log" 2>&1
    count "prompt gates" $? "$OUT/prompt-gates.log"
fi
if room 75 test_moe; then
    timeout $((budget - (SECONDS - t0) - 10)) build/tests/test_moe > "$OUT/moe.log" 2>&1
    count test_moe $? "$OUT/moe.log"
    grep -c 'moe_prefill_narrow' "$OUT/moe.log"
fi
bench() { # $1 model, $2 prompt tokens, then settings
    local m=$1 p=$2; shift 2
    local sets=()
    for s in "$@"; do sets+=(--set "$s"); done
    echo "== $m prefill $p, $*"
    timeout 120 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
        --set serve.max_context=8192 "${sets[@]}" --batch 1 --prompt "$p" --steps 2 |
        grep -E "^prefill:|^attention by|^experts "
}
for r in 1 2; do
    for p in 1024 2048; do
        [ $r = 2 ] && [ $p = 2048 ] && continue
        for n in 0 1; do room 30 narrow-ab && bench gemma4-26b-a4b $p serve.moe_narrow_tiles=$n; done
    done
done > "$OUT/narrow-ab.log" 2>&1
echo "narrow ab: done at $((SECONDS - t0)) s"; cat "$OUT/narrow-ab.log"
for r in 1 2; do
    for p in 1024 4096; do
        for f in 0 1 2; do room 40 forms-ab && bench gemma4-26b-a4b $p serve.attn_prompt=$f; done
    done
done > "$OUT/forms-ab.log" 2>&1
echo "forms ab: done at $((SECONDS - t0)) s"; grep -E "^==|^prefill:|^attention by" "$OUT/forms-ab.log"
ncu_run() { # $1 log, $2 kernel regex, $3 launches, then settings
    local log=$1 re=$2 n=$3; shift 3
    local sets=()
    for s in "$@"; do sets+=(--set "$s"); done
    timeout 100 ncu --kernel-name regex:"$re" --launch-count "$n" \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=4096 "${sets[@]}" --batch 1 --prompt 1024 --steps 1 > "$OUT/$log" 2>&1
    echo "ncu $log: exit $? at $((SECONDS - t0)) s"
    grep -E "_kernel|^ +Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|L2 Hit Rate|Executed Ipc A|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" "$OUT/$log" | head -40
}
if command -v ncu >/dev/null; then
    room 60 ncu-moe0 && ncu_run ncu-moe0.txt moe_staged_kernel 2 serve.moe_narrow_tiles=0
    room 60 ncu-moe1 && ncu_run ncu-moe1.txt moe_staged_kernel 2 serve.moe_narrow_tiles=1
    room 60 ncu-attn2 && ncu_run ncu-attn2.txt attn_prompt_kernel 2 serve.attn_prompt=2
fi
for f in 1 2; do room 40 31b && bench gemma4-31b 1024 serve.attn_prompt=$f; done > "$OUT/31b.log" 2>&1
cat "$OUT/31b.log"
echo "done at $((SECONDS - t0)) s"
