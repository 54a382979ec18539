#!/usr/bin/env bash
# tests/gpu/plans/prompt-pass.sh - one device call for serve.attn_prompt (prompt rows'
# attention on their own pass, kernels/attn_prompt.cu; on at form 1 since the forty-second
# session, form 2 the four-warp blocks, two an SM; 0 the split passes, other bits),
# run in the tree itself (no queue; carry .deps):
#   1. the build (~180 s on the box)
#   2. test_attn's prompt gates alone (G4_ATTN_GATES=prompt: the pass against the reference at
#      the op gate's bound, the generated row's bits, slices of 1, 7, 33 and 100 rows and form 2
#      bit-equal to form 1's one launch, both pools, every config)
#   3. ncu over the pass's first launches (PROMPT_NCU=0 skips it) and over the prefill experts'
#      kernels (MOE_NCU=0 skips it), then bench_decode, 26B-A4B dummy weights, one prompt of 1,024 and of 4,096 tokens, the last
#      chunk's attention by layer kind, attn_prompt 0 / 1 / 2 (PROMPT_FORMS), two rounds; 16,384
#      tokens once (PROMPT_LONG=0 skips it); the 31B at 1,024 tokens once
#   4. the trained fixtures' and engine gates at PROMPT_TRAINED's form (default 2:
#      G4_FIXTURE_SET=serve.attn_prompt=2 gpu-test engine_vs_hf trained), as long as the call
#      lasts (CALL_SECONDS, default 560)
# Logs under $OUT (or /tmp/g4pipe-out): build.log, prompt-gates.log, ab.log, trained.log.
. tests/gpu/plans/preamble.sh
if [ -x build/tests/test_attn ] && [ "${PROMPT_REBUILD:-1}" = 0 ]; then
    echo "the box's earlier build" > "$OUT/build.log"
else
    ./build.sh tests > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
fi
echo "build: $((SECONDS - t0)) s"
G4_ATTN_GATES=prompt timeout 200 build/tests/test_attn > "$OUT/prompt-gates.log" 2>&1
count "prompt gates" $? "$OUT/prompt-gates.log"
# ncu_run LOG KERNEL_REGEX LAUNCHES [settings]: ncu over a 1,024-token 26B-A4B prefill's first
# launches of the kernels named, their summary lines printed
ncu_run() {
    local log=$1 re=$2 n=$3
    shift 3
    local sets=()
    for s in "$@"; do sets+=(--set "$s"); done
    timeout 150 ncu --kernel-name regex:"$re" --launch-count "$n" \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section InstructionStats \
        build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
        --set serve.max_context=4096 "${sets[@]}" --batch 1 --prompt 1024 --steps 1 \
        > "$OUT/$log" 2>&1
    echo "ncu $log: exit $? at $((SECONDS - t0)) s"
    grep -E "_kernel|^ +Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|L2 Hit Rate|Executed Ipc A|Issue Slots Busy|No Eligible|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued" "$OUT/$log" | head -60
}
if command -v ncu >/dev/null; then
    # the pass's first six launches (five windowed layers, then a global one) at form
    # PROMPT_NCU_FORM (default 2); PROMPT_NCU=0 skips it
    [ "${PROMPT_NCU:-1}" = 1 ] &&
        ncu_run ncu.txt attn_prompt_kernel 6 serve.attn_prompt="${PROMPT_NCU_FORM:-2}"
    # the prefill experts' ring kernels (moe_staged_kernel, up then down): what bounds them
    # (DRAM, L2, shared memory, the mma issue or latency); MOE_NCU=0 skips it
    [ "${MOE_NCU:-1}" = 1 ] && ncu_run ncu-moe.txt moe_staged_kernel 2
fi
bench() { # $1 model, $2 prompt tokens, $3 attn_prompt
    echo "== $1 prefill $2, attn_prompt $3"
    timeout 120 build/tests/bench_decode -c conf/$1.ini --set model.weights=dummy \
        --set serve.max_context=17408 --set serve.attn_prompt="$3" --batch 1 --prompt "$2" \
        --steps 2 | grep -E "^prefill|^attention"
}
forms=${PROMPT_FORMS:-0 1 2}
for r in 1 2; do
    for p in 1024 4096; do
        for f in $forms; do bench gemma4-26b-a4b $p $f; done
    done
done > "$OUT/ab.log" 2>&1
if [ "${PROMPT_LONG:-1}" = 1 ]; then
    for f in $forms; do bench gemma4-26b-a4b 16384 $f; done >> "$OUT/ab.log" 2>&1
fi
for f in $forms; do bench gemma4-31b 1024 $f; done >> "$OUT/ab.log" 2>&1
echo "ab: done at $((SECONDS - t0)) s"
grep -E "^==|^prefill:|^attention " "$OUT/ab.log" | head -80
left=$(( ${CALL_SECONDS:-560} - (SECONDS - t0) ))
if [ "$left" -gt 60 ]; then
    G4_FIXTURE_SET=serve.attn_prompt=${PROMPT_TRAINED:-2} timeout "$left" \
        ./build.sh gpu-test engine_vs_hf trained > "$OUT/trained.log" 2>&1
    count "trained, engine gates (attn_prompt ${PROMPT_TRAINED:-2})" $? "$OUT/trained.log"
    grep -E 'summary|passed' "$OUT/trained.log" | cut -c1-300 | head -4
fi
