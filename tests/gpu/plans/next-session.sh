# tests/gpu/plans/next-session.sh - a box_queue.sh plan for the twenty-fifth session's device
# time, written by the twenty-fourth (carry .deps; follow `start` with `wait` calls back to back:
# a machine idle for 30 s goes back with the plan). PLAN_STEPS picks; default
# "ncu e4b 26bfp8 geometry", in order:
#   ncu      where the tensor-core attention (serve.attn_mma, on since 8675712) spends a 26B-A4B
#            step at 1 and 16 rows: ncu over attn_mma_kernel (docs/perf-notes.md, M16), ~2 min
#   e4b      the E4B's full step with attn_mma on, ~5 min (issue 18's two fp8 cases at 2,047
#            tokens expected, nothing else)
#   26bfp8   the 26B-A4B's fp8 mixed cases, the part of its full step the last session lost, ~4 min
#   geometry the geometry gates with attn_mma on, ~5 min
#   31b      the 31B's full step, ~20 min with its make: a session's call of its own
#            (PLAN_STEPS=31b)
#   t31      (not in the default) the 31B's graphed timeline at one row, ~3 min: the trace build
#            stamps each cuBLASLt call, so its projections get their own lines
want() { [[ " ${PLAN_STEPS:-ncu e4b 26bfp8 geometry} " == *" $1 "* ]]; }
mma_ncu() {
    local b
    for b in 1 16; do
        echo "== ncu attention kernels (tensor-core passes), gemma4-26b-a4b batch $b"
        timeout 200 ncu --clock-control none --profile-from-start off \
            --kernel-name "regex:attn" --launch-skip 0 --launch-count 36 \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats --section MemoryWorkloadAnalysis \
            --section ComputeWorkloadAnalysis --section SchedulerStats \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.cuda_graphs=0 \
            --batch $b --prompt 1024 --steps 2
    done
}
want ncu && step build ./build.sh gpu-test test_sample # builds the test programs (bench_decode)
want ncu && step mma-ncu bash -c "$(declare -f mma_ncu); mma_ncu"
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
want 26bfp8 && step full-26b-fp8-mixed env FULL_MODELS="26b-a4b" FULL_POOLS=fp8 FULL_MODES=mixed ./build.sh gpu-test full
want geometry && step geometry ./build.sh gpu-test geometry
want 31b && step full-31b env FULL_MODELS=31b ./build.sh gpu-test full
want t31 && step t31-trace-build ./build.sh trace
want t31 && step t31-trace bash -c "timeout 150 build/trace/tests/bench_decode -c conf/gemma4-31b.ini \
    --set model.weights=dummy --set serve.max_context=4096 --batch 1 --prompt 1024 --steps 32 \
    --trace 16 | sed -n '2p;/^kernel trace/,\$p'"
