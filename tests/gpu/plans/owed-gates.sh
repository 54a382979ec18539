#!/usr/bin/env bash
# tests/gpu/plans/owed-gates.sh - one device call for the gates a tree owes after a session whose
# last kernel edit ran no GPU gate (the forty-eighth's 53ae7c8: the prep's two rounding forms),
# run in the tree itself (carry .deps, and .prebuilt when packed):
#   1. the build
#   2. test_attn with G4_ATTN_GATES=prompt (every prep and prep_rows gate, then the prompt
#      pass's; ~55 s)
#   3. the 26B-A4B's full step (bf16, the defaults) with the time that is left (~260 s;
#      OWED_POOLS picks the pools)
# Logs under $OUT: build.log, attn.log, full.log.
. tests/gpu/plans/preamble.sh
build_tree "${OWED_REBUILD:-1}"
G4_ATTN_GATES=prompt timeout 150 build/tests/test_attn > "$OUT/attn.log" 2>&1
count "test_attn (prep, prep_rows, prompt)" $? "$OUT/attn.log"
if [ "$(left)" -gt 200 ]; then
    FULL_MODELS=26b-a4b FULL_POOLS="${OWED_POOLS:-bf16}" G4_PREBUILT=1 \
        timeout $(( $(left) - 10 )) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b ${OWED_POOLS:-bf16} (defaults)" $? "$OUT/full.log"
else
    echo "full: skipped, $(left) s left"
fi
echo "done at $((SECONDS - t0)) s"
