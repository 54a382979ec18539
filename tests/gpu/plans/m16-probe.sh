# tests/gpu/plans/m16-probe.sh - a box_queue.sh plan (twenty-fifth session): what bounds the
# tensor-core attention at 16 26B-A4B rows (docs/perf-notes.md, M16), in ~5 min with the build:
# bench_decode with the splits a block forced to 1, 2, 4, 8 against the launcher's choice (bf16
# and fp8 pools), then ncu over one sliding and one global layer's attention launches (the first
# 19 attention kernels of a step: five sliding layers' prep and two passes, then the global
# layer's prep, passes and combine) and one fp8 sliding layer's.
m16_spb() {
    local pool b
    for pool in bf16 fp8; do
        for b in 0 1 2 4 8; do
            echo "== attn_splits_per_block $b, gemma4-26b-a4b, 16 rows, $pool pool"
            timeout 150 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set kv.local=$pool --set serve.attn_splits_per_block=$b \
                --batch 16 --prompt 1024 --steps 32 | grep -E "^decode step|^attention"
        done
    done
}
m16_ncu() {
    local pool n
    for pool in bf16 fp8; do
        n=19
        [ $pool = fp8 ] && n=3
        echo "== ncu attention kernels, gemma4-26b-a4b, 16 rows, $pool pool"
        timeout 240 ncu --clock-control none --profile-from-start off \
            --kernel-name "regex:attn" --launch-skip 0 --launch-count $n \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats --section MemoryWorkloadAnalysis \
            --section SchedulerStats --section SourceCounters \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.cuda_graphs=0 \
            --set kv.local=$pool --batch 16 --prompt 1024 --steps 2
    done
}
step build ./build.sh gpu-test test_sample # builds the test programs (bench_decode)
step m16-spb bash -c "$(declare -f m16_spb); m16_spb"
step m16-ncu bash -c "$(declare -f m16_ncu); m16_ncu"
