#!/usr/bin/env bash
# tests/gpu/plans/prep-round.sh - one device call for the attention prep's roundings by the
# conversion instruction (attn_round_bf16, kernels/attn_common.cuh; the same bits by argument),
# run in the tree itself (carry .deps, .prebuilt when packed, and .ab/prep.patch: the change's
# diff, `git diff d7528f7~1 d7528f7 -- kernels/`, so that the box builds both sides with its own
# static cuBLASLt and the A/B needs no switch):
#   1. the build (~60-130 s with objects packed here by tests/gpu/prebuilt.sh): the change (B)
#   2. test_attn's prep gates against the CPU twin, and the prompt pass's subset (which uses
#      the same helper): G4_ATTN_GATES=prompt
#   3. the pinned composition (tests/proto/test_pinned.py --backend gpu): the recording's bytes,
#      which every prep of its prompts and steps feeds
#   4. bench_decode kept as B; the patch reversed and the attention objects rebuilt (A)
#   5. A against B, 26B-A4B dummy weights: one 1,024-token prompt, PREP_ROUNDS (default 3)
#      paired rounds, the order flipped each round; one decode row once each
#   6. the patch applied again, and the 26B-A4B's full step (bf16, the defaults) when more than
#      PREP_FULL_MIN (default 330) s of the call are left
# Logs under $OUT: build.log, attn.log, pinned.log, build-a.log, ab.log, build-b.log, full.log.
. tests/gpu/plans/preamble.sh
build_tree "${PREP_REBUILD:-1}"
G4_ATTN_GATES=prompt timeout 200 build/tests/test_attn > "$OUT/attn.log" 2>&1
count "test_attn (prep, prompt)" $? "$OUT/attn.log"
BUILD_DIR=build timeout 120 python3 tests/proto/test_pinned.py --backend gpu > "$OUT/pinned.log" 2>&1
count "pinned composition" $? "$OUT/pinned.log"
# the change's diff forward or (-R) reversed: patch where the box has it, else git apply
prep_patch() {
    if command -v patch > /dev/null; then patch -p1 "$@" < .ab/prep.patch > /dev/null; else git apply "$@" .ab/prep.patch; fi
}
mkdir -p /tmp/ab && cp build/tests/bench_decode /tmp/ab/bench_B
prep_patch -R && touch kernels/attn_common.cuh &&
    ./build.sh tests > "$OUT/build-a.log" 2>&1 && cp build/tests/bench_decode /tmp/ab/bench_A ||
    { echo "the A build failed"; tail -20 "$OUT/build-a.log"; exit 1; }
echo "A built: $((SECONDS - t0)) s"
ab() { # which, label, then bench_decode's arguments
    local which=$1 label=$2
    shift 2
    echo "== $which $label"
    timeout 100 "/tmp/ab/bench_$which" -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=8192 "$@"
}
{
    for r in $(seq "${PREP_ROUNDS:-3}"); do
        order="A B"
        [ $((r % 2)) = 0 ] && order="B A"
        for w in $order; do ab "$w" "prefill 1024, round $r" --batch 1 --prompt 1024 --steps 2; done
    done
    for w in A B; do ab "$w" "1 row" --batch 1 --prompt 1024 --steps 64; done
} > "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill: 1024|^decode step|^attn_prep  " "$OUT/ab.log" | cut -c1-120 | head -60
if [ "$(left)" -gt "${PREP_FULL_MIN:-330}" ]; then
    prep_patch && touch kernels/attn_common.cuh &&
        ./build.sh tests > "$OUT/build-b.log" 2>&1 || { echo "the B rebuild failed"; exit 1; }
    FULL_MODELS=26b-a4b FULL_POOLS=bf16 G4_PREBUILT=1 timeout $(($(left) - 10)) \
        ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b bf16 (defaults)" $? "$OUT/full.log"
fi
echo "done at $((SECONDS - t0)) s"
