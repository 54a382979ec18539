# tests/gpu/plans/branches-tiles.sh - a box_queue.sh plan, alone or as next-session.sh's `bt`:
# the switches the thirty-second and thirty-third sessions wrote and could not run, measured and
# gated. Alone, the measurements go first, since they decide the defaults; where the 26B-A4B's
# full checkpoint is being made beside it (next-session.sh's make26), the gates go first and the
# measurements wait for the make, whose torch model would disturb them. Carry .deps and .prebuilt
# (tests/gpu/prebuilt.sh: the objects built here, so the box links instead of compiling).
# BT_STEPS picks (default "build ab gates ncu"):
#   build     ./build.sh tests (links, where the carried objects are current)
#   ab        bench_decode, two rounds: serve.moe_branches 0 against 16 at 1 and 16 26B-A4B rows
#             (predicted -0.3 to -0.6 ms at one row, -0.1 to -0.3 at 16), a 1,024-token prefill
#             0 against 4096 (-1.5 to -3 ms); serve.prompt_tile 64, 96 and 128 with
#             serve.prompt_experts on, against it off (predicted its experts 24.2 -> ~15-17 ms at
#             128: each expert's weights read once where 64-item tiles read them ~1.45 times)
#   gates     the GPU pinned recording (replayed with every speed switch), the engine gates with
#             serve.moe_branches = 64, then test_moe (moe_prompt_experts at tiles 64 and 128,
#             moe_prompt_tile_range)
#   ncu       ncu over the first decode step's projections and experts at 1 and 16 26B-A4B
#             rows (the first 10 such launches: layer 0's q|k|v, o, gate|up, down, router, up
#             and down experts, then layer 1's), graphs off: DRAM throughput, occupancy, warp
#             stalls. At one row they stream at 55-63% of copy bandwidth in 7-23 us a launch
#             (docs/perf-notes.md, thirtieth session); whether ramp and tail or the loads
#             themselves bound them decides between wider kernels and the persistent one, ~3 min
# (`sweep`, the bf16-pool attention switches 0 against 1, was here: attn_early_lookup is on by
# default and the other two were taken out, measured in the thirty-fifth session)
bt_want() { [[ " ${BT_STEPS:-build ab gates ncu} " == *" $1 "* ]]; }
# shellcheck source=/dev/null
. tests/gpu/plans/bench26.sh
ab_next() {
    local r v b t
    for r in 1 2; do
        for b in 1 16; do
            for v in 0 16; do
                bench26 "$b rows, moe_branches $v, round $r" --set serve.moe_branches=$v \
                    --batch $b --prompt 1024 --steps 32
            done
        done
        for v in 0 4096; do
            bench26 "prefill, moe_branches $v, round $r" --set serve.moe_branches=$v \
                --batch 1 --prompt 1024 --steps 8
        done
        bench26 "prefill, prompt_experts 0, round $r" --batch 1 --prompt 1024 --steps 8
        for t in 64 96 128; do
            bench26 "prefill, prompt_experts 1, prompt_tile $t, round $r" \
                --set serve.prompt_experts=1 --set serve.prompt_tile=$t --batch 1 --prompt 1024 \
                --steps 8
        done
        bench26 "prefill, prompt_experts 1, prompt_tile 128, moe_branches 4096, round $r" \
            --set serve.prompt_experts=1 --set serve.prompt_tile=128 \
            --set serve.moe_branches=4096 --batch 1 --prompt 1024 --steps 8
    done
}
ncu_next() {
    local b
    for b in 1 16; do
        echo "== ncu, $b rows"
        timeout 250 ncu --clock-control none \
            --kernel-name "regex:gemm_mma_group_kernel|gemm_mma_kernel|moe_up_mma_kernel|moe_down_mma_kernel" \
            --launch-skip 0 --launch-count 10 --section SpeedOfLight --section Occupancy \
            --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.cuda_graphs=0 --batch $b --prompt 64 \
            --steps 1
    done
}
bt_gates() {
    bt_want gates || return 0
    step pinned ./build.sh gpu-test pinned_composition
    step br-engine env G4_FIXTURE_SET="serve.moe_branches=64" ./build.sh gpu-test engine_vs_hf
    step moe ./build.sh gpu-test test_moe
}
bt_ab() {
    bt_want ab || return 0
    if declare -F await_make > /dev/null; then await_make; fi
    step ab ab_next
}
bt_want build && step build ./build.sh tests
if [ -f "$Q/logs/make26.time" ] && [ ! -f "$Q/logs/make26.rc" ]; then
    bt_gates
    bt_ab
else
    bt_ab
    bt_gates
fi
bt_want ncu && step ncu ncu_next
