# tests/gpu/plans/next-session.sh - a box_queue.sh plan for the twenty-third session's device
# time, written by the twenty-second (carry .deps; follow `start` with `wait` calls back to back:
# a machine idle for 30 s goes back with the plan). What this session's changes have not
# reached, in order (PLAN_STEPS picks; default all):
#   wide   serve.wide_loads (written after the device time was spent, off): its gates
#          (test_gemm_lt's gemm_wide_loads and the group and invariance gates with it on,
#          test_moe's wide_loads, the pinned replay with it on), then bench_decode 0 against 1,
#          26B-A4B at 1 and 16 rows and the 31B at one, two rounds (predicted -0.2 to -0.4 ms at
#          one 26B-A4B row; 16 rows and the 31B's cuBLASLt projections should not move), ~5 min;
#          the default flips only on a measured gain, and the full step below then runs with it
#   e4b    the E4B's full step (the fold at 2,560-element rows with PLE through the binary;
#          issue 18's two fp8 failures at 2,047 tokens are expected, nothing else), ~8 min
#   e2b    the E2B's full step (its bf16 half and fp8 alone passed on 0a7f15d; fp8 mixed was
#          cut off by the device time), ~4 min
#   31b    the 31B's full step, both pools in one run (its make, ~10 min, serves both; the wide
#          chain and the three-op layer end at full depth; not run since 7ffd2db), ~20 min: more
#          than one session's device time left after the ones above; start it first in a
#          session of its own (PLAN_STEPS=31b) if they have passed
want() { [[ " ${PLAN_STEPS:-wide e4b e2b 31b} " == *" $1 "* ]]; }
want wide && step wide-gates ./build.sh gpu-test test_gemm_lt test_moe pinned_composition
wide_ab() {
    local mb m b wl
    for mb in gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1; do
        m=${mb%:*} b=${mb#*:}
        for wl in 0 1; do
            echo "== wide_loads $wl, $m batch $b"
            timeout 120 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set serve.wide_loads=$wl --batch $b \
                --prompt 1024 --steps 32 | grep -E "^decode step|^prefill|^experts|_proj|moe_"
        done
    done
}
want wide && step wide-ab bash -c "$(declare -f wide_ab); for r in 1 2; do echo \"-- round \$r\"; wide_ab; done"
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
want e2b && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
want 31b && step full-31b env FULL_MODELS=31b ./build.sh gpu-test full
