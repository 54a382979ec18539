# tests/gpu/plans/load-step-tokens.sh - a box_queue.sh plan (carry .deps): the load benchmark
# that chooses serve.step_tokens' default (issue 22, docs/benchmarks.md): the 26B-A4B on dummy
# weights, requests arriving as a seeded Poisson process at rates that keep a few to ~16
# requests running (prompts 128-8,192 tokens, outputs 64-512), the whole-chunk step
# (step_tokens 0) against each budget in LOAD_BUDGETS, LOAD_ROUNDS rounds (ABBA); each bench
# stops starting rounds past LOAD_SECONDS so it writes its results inside the plan's time.
# Results (JSON, markdown, PNG) under build/load, brought back in the logs; the chosen default's
# go to release/results/ in its commit. Knobs (defaults): LOAD_BUDGETS ("256 1024"), LOAD_RATES
# (1,2,4), LOAD_REQUESTS (32), LOAD_ROUNDS (2), LOAD_SECONDS (500); LOAD_FULL_SETS, when set,
# adds the 26B-A4B's full step with those --set overrides after the benches (~440 s).
mkdir -p build/load
# the benches and the full step need the binary alone (the full step's checkpoint and reference
# are made with torch on the box), the full step's build its test programs too. LOAD_PREBUILT=1
# with a carried build/g4pipe (a GPU build from a CUDA 13.0 host of glibc <= the box's) skips
# the build when the binary finds its libraries: a scarce device's ~150 s
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
prebuilt=0
if [ "${LOAD_PREBUILT:-0}" = 1 ] && [ -x build/g4pipe ] && ! ldd build/g4pipe | grep -q "not found"; then
    prebuilt=1
    step build ldd build/g4pipe
else
    step build ./build.sh $([ -n "${LOAD_FULL_SETS:-}" ] && echo tests || echo build)
fi
for b in ${LOAD_BUDGETS:-256 1024}; do
    step load-$b timeout 590 python3 release/bench.py -c conf/gemma4-26b-a4b.ini \
        --load "${LOAD_RATES:-1,2,4}" --requests "${LOAD_REQUESTS:-32}" \
        --rounds "${LOAD_ROUNDS:-2}" --max-seconds "${LOAD_SECONDS:-500}" --rate-timeout 240 \
        --a-label chunk --b-label budget$b --b-set serve.step_tokens=$b --out build/load/b$b
    cp -r build/load "$Q/logs/" 2>/dev/null
done
[ -n "${LOAD_FULL_SETS:-}" ] && step full-26b env FULL_MODELS="26b-a4b" FULL_POOLS="fp8 bf16" \
    FULL_SETS="$LOAD_FULL_SETS" G4_PREBUILT=$prebuilt ./build.sh gpu-test full
true
