#!/usr/bin/env bash
# tests/gpu/plans/confirm.sh - the call after prompt-pass.sh, on the same warm box (its build
# kept; carry .deps): the gates the forty-second session's unrun work still owes.
#   1. the trained fixtures' and engine gates with CONFIRM_SETS (default "serve.attn_prompt=2":
#      form 2, not yet gated at full strength)
#   2. the 26B-A4B's full step with the defaults, pool CONFIRM_POOLS (default fp8: it never ran
#      with the prompt pass), on the box's build (G4_PREBUILT=1)
#   3. the whole test_attn (not run since its case machinery moved), as long as the call lasts
# Logs under $OUT (or /tmp/g4pipe-out). CALL_SECONDS (default 575) bounds the call.
. tests/gpu/plans/preamble.sh
budget=${CALL_SECONDS:-575}
left() { echo $((budget - (SECONDS - t0))); }
[ -x build/g4pipe ] || { ./build.sh tests > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }; }
if [ "${CONFIRM_TRAINED:-1}" = 1 ]; then
    G4_FIXTURE_SET="${CONFIRM_SETS:-serve.attn_prompt=2}" G4_PREBUILT=1 \
        timeout $(( $(left) - 30 )) ./build.sh gpu-test engine_vs_hf trained > "$OUT/trained.log" 2>&1
    count "trained, engine (${CONFIRM_SETS:-serve.attn_prompt=2})" $? "$OUT/trained.log"
fi
if [ "${CONFIRM_FULL:-1}" = 1 ] && [ "$(left)" -gt 300 ]; then
    FULL_MODELS=26b-a4b FULL_POOLS="${CONFIRM_POOLS:-fp8}" G4_PREBUILT=1 \
        timeout $(( $(left) - 20 )) ./build.sh gpu-test full > "$OUT/full.log" 2>&1
    count "full 26b-a4b ${CONFIRM_POOLS:-fp8}" $? "$OUT/full.log"
    grep -E "gap|margin" "$OUT/full.log" | tail -6 | cut -c1-250
fi
if [ "$(left)" -gt 60 ]; then
    timeout $(( $(left) - 10 )) build/tests/test_attn > "$OUT/attn.log" 2>&1
    count "test_attn (whole)" $? "$OUT/attn.log"
fi
echo "done at $((SECONDS - t0)) s"
