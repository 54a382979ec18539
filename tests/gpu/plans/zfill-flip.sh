#!/usr/bin/env bash
# tests/gpu/plans/zfill-flip.sh - one device call for the tree with serve.moe_ring_zfill on by
# default (kernels/moe.cu), run in the tree itself (carry .deps, and .prebuilt when packed):
#   1. the build (~115-140 s with objects packed here by tests/gpu/prebuilt.sh)
#   2. test_moe whole (the default path against the CPU twin; the looped ring against zfill)
#   3. the 26B-A4B's full step with the defaults (FLIP_POOLS, default bf16), ~265 s
#   4. with the time left: bench_decode, 26B-A4B dummy weights, one 1,024-token prompt, and a
#      one-row decode at 1,024 tokens of context (the card's reading of this tree)
# Logs under $OUT: build.log, moe.log, full.log, bench.log.
. tests/gpu/plans/preamble.sh
build_tree "${FLIP_REBUILD:-1}"
timeout "${MOE_SECONDS:-150}" build/tests/test_moe > "$OUT/moe.log" 2>&1
count "test_moe" $? "$OUT/moe.log"
if [ "$(left)" -gt 200 ]; then
    FULL_MODELS=26b-a4b FULL_POOLS="${FLIP_POOLS:-bf16}" \
        G4_PREBUILT=1 timeout $(($(left) - 70)) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b ${FLIP_POOLS:-bf16} (defaults)" $? "$OUT/full.log"
fi
bench() { # label, then bench_decode's arguments
    local label=$1
    shift
    echo "== $label"
    timeout 60 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=4096 "$@"
}
if [ "$(left)" -gt 40 ]; then
    bench "26b-a4b prefill 1024" --batch 1 --prompt 1024 --steps 2 > "$OUT/bench.log" 2>&1
    [ "$(left)" -gt 30 ] &&
        bench "26b-a4b bf16 1 row" --batch 1 --prompt 1024 --steps 32 >> "$OUT/bench.log" 2>&1
    grep -E "^==|^decode step|^prefill:|^experts  " "$OUT/bench.log" | cut -c1-160
fi
echo "done at $((SECONDS - t0)) s"
