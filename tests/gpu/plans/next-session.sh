# tests/gpu/plans/next-session.sh - a box_queue.sh plan for the twenty-fifth session's device
# time, written by the twenty-fourth (carry .deps; follow `start` with `wait` calls back to back:
# a machine idle for 30 s goes back with the plan). PLAN_STEPS picks; default
# "tiles ncu e4b 26bfp8 geometry", in order:
#   tiles    serve.attn_query_tiles (written after the device time was spent, off): test_attn's
#            `query tiles` gates (bits equal to a block per row) and the pinned replay with it on,
#            the engine gates with it on, then bench_decode's prefill at 0 against 64 rows (26B-A4B
#            and 31B, 1,024 tokens, two rounds; predicted 26B-A4B attention ~38 -> ~10-15 ms a
#            chunk); the default flips only on a measured gain, ~6 min
#   ncu      where the tensor-core attention (serve.attn_mma, on since 8675712) spends a 26B-A4B
#            step at 1 and 16 rows: ncu over attn_mma_kernel (docs/perf-notes.md, M16), ~2 min
#   spb      (not in the default) bench_decode at 16 26B-A4B rows with the splits a block forced
#            to 1, 2, 8 against the launcher's choice (M16 (a)), ~2 min
#   e4b      the E4B's full step with attn_mma on, ~5 min (issue 18's two fp8 cases at 2,047
#            tokens expected, nothing else)
#   26bfp8   the 26B-A4B's fp8 mixed cases, the part of its full step the last session lost, ~4 min
#   geometry the geometry gates with attn_mma on, ~5 min
#   31b      the 31B's full step, ~20 min with its make: a session's call of its own
#            (PLAN_STEPS=31b)
#   t31      (not in the default) the 31B's graphed timeline at one row, ~3 min: the trace build
#            stamps each cuBLASLt call, so its projections get their own lines
want() { [[ " ${PLAN_STEPS:-tiles ncu e4b 26bfp8 geometry} " == *" $1 "* ]]; }
want tiles && step tiles-gates ./build.sh gpu-test test_attn pinned_composition
want tiles && step tiles-engine env G4_FIXTURE_SET=serve.attn_query_tiles=1 ./build.sh gpu-test engine_vs_hf
tiles_ab() {
    local m t
    for m in gemma4-26b-a4b gemma4-31b; do
        for t in 0 64; do
            echo "== attn_query_tiles $t, $m, one 1,024-token prompt"
            timeout 150 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set serve.attn_query_tiles=$t --batch 1 \
                --prompt 1024 --steps 8 | grep -E "^decode step|^prefill|attention"
        done
    done
}
want tiles && step tiles-ab bash -c "$(declare -f tiles_ab); for r in 1 2; do echo \"-- round \$r\"; tiles_ab; done"
ATTN_NCU_DEFINE_ONLY=1 && . tests/gpu/plans/attn-ncu.sh && unset ATTN_NCU_DEFINE_ONLY
want ncu && step build ./build.sh gpu-test test_sample # builds the test programs (bench_decode)
want ncu && step mma-ncu bash -c "$(declare -f attn_ncu); attn_ncu"
spb_ab() {
    local b
    for b in 0 1 2 8; do
        echo "== attn_splits_per_block $b, gemma4-26b-a4b, 16 rows"
        timeout 150 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.attn_splits_per_block=$b --batch 16 \
            --prompt 1024 --steps 32 | grep -E "^decode step|attention"
    done
}
want spb && step spb-ab bash -c "$(declare -f spb_ab); spb_ab"
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
want 26bfp8 && step full-26b-fp8-mixed env FULL_MODELS="26b-a4b" FULL_POOLS=fp8 FULL_MODES=mixed ./build.sh gpu-test full
want geometry && step geometry ./build.sh gpu-test geometry
want 31b && step full-31b env FULL_MODELS=31b ./build.sh gpu-test full
want t31 && step t31-trace-build ./build.sh trace
want t31 && step t31-trace bash -c "timeout 150 build/trace/tests/bench_decode -c conf/gemma4-31b.ini \
    --set model.weights=dummy --set serve.max_context=4096 --batch 1 --prompt 1024 --steps 32 \
    --trace 16 | sed -n '2p;/^kernel trace/,\$p'"
