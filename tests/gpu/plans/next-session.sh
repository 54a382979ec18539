# tests/gpu/plans/next-session.sh - a box_queue.sh plan for the twenty-sixth session's device
# time, written by the twenty-fifth (carry .deps; follow `start` with `wait` calls back to back:
# a machine idle for 30 s goes back with the plan, and the twenty-fifth session lost two that
# way). PLAN_STEPS picks; default "gates ab 26b e4b" (~24 min), in order:
#   gates    the two switches written after the twenty-fifth session's device time, both off:
#            test_attn's `fp8 fragments` gates (serve.attn_fp8_frags: e4m3 operands built as
#            loaded, bits against the widened units) and test_moe's `moe_prefill_staged` gates
#            (serve.moe_prefill_tiles = 2: the experts' staged prefill kernels, byte-equal), then
#            the engine gates with both on (the trained fixtures run both pools), ~9 min
#   ab       bench_decode, two rounds: the fp8 pool at 16 and 1 26B-A4B rows and 16 31B rows,
#            attn_fp8_frags 0 against 1 (predicted 16-row 26B-A4B attention ~2.06 -> 1.1-1.5 ms);
#            a 1,024-token 26B-A4B prefill, moe_prefill_tiles 1 against 2 (predicted experts ~38
#            -> 25-30 ms); defaults flip only on a measured gain, ~2 min
#   26b      the 26B-A4B's full step with this tree's defaults (attn_mma, query tiles at 64, the
#            splits-a-block rule), ~10 min
#   e4b      the E4B's full step, ~5 min (issue 18's two fp8 cases at 2,047 tokens expected)
#   e2b      (not in the default) the E2B's, ~3 min
#   geometry (not in the default) the geometry gates, ~5 min
#   31b      (not in the default) the 31B's full step, ~20 min with its make: a call of its own
#   tncu     (not in the default) ncu over the query-tile kernels of a 1,024-token 26B-A4B
#            prefill (they reached 20 ms where 10-15 was predicted), ~3 min
want() { [[ " ${PLAN_STEPS:-gates ab 26b e4b} " == *" $1 "* ]]; }
want gates && step gates ./build.sh gpu-test test_attn test_moe
want gates && step gates-engine env G4_FIXTURE_SET="serve.attn_fp8_frags=1 serve.moe_prefill_tiles=2" \
    ./build.sh gpu-test engine_vs_hf trained
ab_next() {
    local r m rows v
    for r in 1 2; do
        echo "-- round $r"
        for m in "gemma4-26b-a4b 16" "gemma4-26b-a4b 1" "gemma4-31b 16"; do
            set -- $m
            for v in 0 1; do
                echo "== $1, $2 rows, fp8 pool, attn_fp8_frags $v"
                timeout 150 build/tests/bench_decode -c conf/$1.ini --set model.weights=dummy \
                    --set serve.max_context=4096 --set kv.local=fp8 --set serve.attn_fp8_frags=$v \
                    --batch $2 --prompt 1024 --steps 32 | grep -E "^decode step|^attention"
            done
        done
        for v in 1 2; do
            echo "== gemma4-26b-a4b, one 1,024-token prompt, moe_prefill_tiles $v"
            timeout 150 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set serve.moe_prefill_tiles=$v --batch 1 --prompt 1024 --steps 8 |
                grep -E "^prefill|^moe|^attention|experts"
        done
    done
}
want ab && step ab bash -c "$(declare -f ab_next); ab_next"
want 26b && step full-26b env FULL_MODELS="26b-a4b" ./build.sh gpu-test full
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
want e2b && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
want geometry && step geometry ./build.sh gpu-test geometry
want 31b && step full-31b env FULL_MODELS=31b ./build.sh gpu-test full
tncu() {
    # the tile kernels run in the prefill only: no --profile-from-start off (it would keep
    # only the profiled decode step)
    timeout 240 ncu --clock-control none \
        --kernel-name "regex:attn_mma_tile" --launch-skip 0 --launch-count 6 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section SchedulerStats \
        build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=4096 --set serve.cuda_graphs=0 --batch 1 --prompt 1024 --steps 1
}
want tncu && step tncu-build ./build.sh gpu-test test_sample # builds bench_decode
want tncu && step tncu bash -c "$(declare -f tncu); tncu"
