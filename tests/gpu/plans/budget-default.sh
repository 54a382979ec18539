# tests/gpu/plans/budget-default.sh - a box_queue.sh plan (carry .deps and, with LOAD_PREBUILT=1,
# build/g4pipe): what choosing serve.step_tokens' default needs (issue 22, docs/benchmarks.md),
# most needed first, so that a call cut short by device time keeps the essentials:
#   1. the load benchmark of the first budget of LOAD_BUDGETS against whole chunks: the 26B-A4B
#      on dummy weights, requests arriving as a seeded Poisson process (prompts 128-8,192
#      tokens, outputs 64-512), LOAD_ROUNDS rounds (ABBA), each bench starting no round past
#      LOAD_SECONDS so it writes its results inside the step's time;
#   2. the 26B-A4B's full step at that budget with BUDGET_SETS (other candidate defaults), unless
#      BUDGET_FULL=0;
#   3. the same checkpoint and reference judged again with serve.prompt_experts=1 (BUDGET_PE=0:
#      not);
#   4. the load benchmark of LOAD_BUDGETS' other budgets, as time allows.
# Knobs (defaults): BUDGET_POOLS (the full steps' pools, "fp8 bf16"; the shipped conf's is bf16),
# LOAD_BUDGETS ("512 256"), LOAD_RATES (2,4), LOAD_REQUESTS (32), LOAD_ROUNDS (2), LOAD_SECONDS
# (500). Results (JSON, markdown, PNG) under build/load, brought back in the
# logs; the chosen default's go to release/results/ in its commit. LOAD_PREBUILT=1 uses a
# carried build/g4pipe (a GPU build from a CUDA 13.0 host of glibc <= the box's) when it finds
# its libraries, so no step builds: a scarce device's ~150 s.
mkdir -p build/load
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
prebuilt=0
if [ "${LOAD_PREBUILT:-0}" = 1 ] && [ -x build/g4pipe ] &&
    ! ldd build/g4pipe | grep -q "not found"; then
    prebuilt=1
    step build ldd build/g4pipe
else
    step build ./build.sh build
fi
load_bench() {
    step load-$1 timeout 590 python3 release/bench.py -c conf/gemma4-26b-a4b.ini \
        --load "${LOAD_RATES:-2,4}" --requests "${LOAD_REQUESTS:-32}" \
        --rounds "${LOAD_ROUNDS:-2}" --max-seconds "${LOAD_SECONDS:-500}" --rate-timeout 240 \
        --a-label chunk --b-label budget$1 --b-set serve.step_tokens=$1 --out build/load/b$1
    cp -r build/load "$Q/logs/" 2>/dev/null
}
set -- ${LOAD_BUDGETS:-512 256}
first=$1
shift
load_bench "$first"
full_step() { # NAME SETS...: the 26B-A4B's full step in BUDGET_POOLS with those settings
    local name=$1
    shift
    step "$name" env FULL_MODELS=26b-a4b FULL_POOLS="${BUDGET_POOLS:-fp8 bf16}" \
        G4_PREBUILT=$prebuilt FULL_SETS="$*" ./build.sh gpu-test full
}
if [ "${BUDGET_FULL:-1}" = 1 ]; then
    full_step full-26b "serve.step_tokens=$first" ${BUDGET_SETS:-}
    [ "${BUDGET_PE:-1}" = 1 ] &&
        full_step full-26b-pe "serve.step_tokens=$first" ${BUDGET_SETS:-} serve.prompt_experts=1
fi
for b in "$@"; do load_bench "$b"; done
true
