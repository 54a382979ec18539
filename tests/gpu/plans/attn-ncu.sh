# tests/gpu/plans/attn-ncu.sh - a box_queue.sh plan (twenty-fourth session): where the decode
# attention's time goes at 1 and 16 rows, ncu over the first 36 attention launches of a 26B-A4B
# step (bf16 pool, no graphs). Sourced with ATTN_NCU_DEFINE_ONLY set, it only defines attn_ncu
# (next-session.sh runs it after its own build).
attn_ncu() {
    local b
    for b in 1 16; do
        echo "== ncu attention kernels, gemma4-26b-a4b batch $b"
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
if [ -z "${ATTN_NCU_DEFINE_ONLY:-}" ]; then
    step build ./build.sh gpu-test test_sample # builds the test programs (bench_decode)
    step attn-ncu bash -c "$(declare -f attn_ncu); attn_ncu"
fi
