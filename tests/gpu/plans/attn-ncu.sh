# tests/gpu/plans/attn-ncu.sh - a box_queue.sh plan (twenty-fourth session): next-session.sh's
# early-weights steps, then where the decode attention's time goes at 1 and 16 rows (ncu over
# the attention kernels of a 26B-A4B step, bf16 pool), for the tensor-core attention design
# (docs/attention-design.md, step 1).
PLAN_STEPS=early . tests/gpu/plans/next-session.sh
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
step attn-ncu bash -c "$(declare -f attn_ncu); attn_ncu"
