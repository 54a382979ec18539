# tests/gpu/plans/budget-default.sh - a box_queue.sh plan (carry .deps and, with LOAD_PREBUILT=1,
# build/g4pipe): what turning serve.step_tokens on needs, most needed first, so that a call cut
# short by device time keeps the essentials (docs/perf-notes.md, fortieth session):
#   1. the load benchmark of the candidate budget against whole chunks (LOAD_BUDGETS' first);
#   2. the 26B-A4B's full step at that budget with the other candidate defaults (BUDGET_SETS);
#   3. the same checkpoint and reference judged again with serve.prompt_experts=1 on;
#   4. the load benchmark of the other budgets, as time allows.
mkdir -p build/load
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
prebuilt=0
if [ "${LOAD_PREBUILT:-0}" = 1 ] && [ -x build/g4pipe ] && ! ldd build/g4pipe | grep -q "not found"; then
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
step full-26b env FULL_MODELS=26b-a4b FULL_POOLS="fp8 bf16" G4_PREBUILT=$prebuilt \
    FULL_SETS="serve.step_tokens=$first ${BUDGET_SETS:-}" ./build.sh gpu-test full
step full-26b-pe env FULL_MODELS=26b-a4b FULL_POOLS="fp8 bf16" G4_PREBUILT=$prebuilt \
    FULL_SETS="serve.step_tokens=$first ${BUDGET_SETS:-} serve.prompt_experts=1" \
    ./build.sh gpu-test full
for b in "$@"; do load_bench "$b"; done
true
