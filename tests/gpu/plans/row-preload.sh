# tests/gpu/plans/row-preload.sh - a box_queue.sh plan (carry .deps; follow `start` with `wait`
# calls back to back), ~5 min: serve.row_chain = 3 (written in the twenty-third session), the
# chain's operands from outside it loaded at once. The A/B first (two rounds, 26B-A4B at 1 and
# 16 rows: predicted -0.05 to -0.1 ms, three round trips a layer of ~1 us), then its gates
# (test_ops' row_chain=3 groups against the ops one by one, the pinned replay with it on).
step build ./build.sh tests
preload_ab() {
    local b rc
    for b in 1 16; do
        for rc in 2 3; do
            echo "== row_chain $rc, gemma4-26b-a4b batch $b"
            timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set serve.row_chain=$rc --batch $b --prompt 1024 --steps 32 |
                grep -E "^decode step|norm"
        done
    done
}
step preload-ab bash -c "$(declare -f preload_ab); for r in 1 2; do echo \"-- round \$r\"; preload_ab; done"
step preload-gates ./build.sh gpu-test test_ops pinned_composition
