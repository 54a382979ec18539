# tests/gpu/plans/ring.sh - a box_queue.sh plan, alone or as next-session.sh's `ring`: the decode
# experts' and projections' rings in shared memory (serve.expert_ring, serve.proj_ring, written
# in the thirty-fourth session after ncu at one row), measured and gated, then the three
# bf16-pool attention switches never measured. Carry .deps and .prebuilt (tests/gpu/prebuilt.sh).
# RING_STEPS picks (default "build ab gates sweep"):
#   build     ./build.sh tests (links, where the carried objects are current)
#   record    (not in the default) the GPU pinned recording re-made at this tree's defaults, for a
#             commit that moves its bits and says why (the thirty-fifth session: serve.prompt_experts
#             on); the replays of `gates` then run against it, and the file comes back in the logs
#   ab        bench_decode, two rounds: serve.expert_ring 0 against 1 at one 26B-A4B row
#             (predicted the experts' up 23.2 -> ~17 us and down 12.1 -> ~9 us a layer on the
#             H200: about -0.27 ms a step; the breakdown's `experts` row 1.46 -> ~1.1 ms on the
#             H100), and at 16 rows, where it must be inert (more than 8 items a call);
#             serve.proj_ring 0, 1 and 2 at 1 and 4 rows (predicted the four projections' rows
#             of the breakdown ~1.70 -> ~1.3 ms at one row on the H100 at 1, less at 2 where the
#             first weights overlap the producer), and both rings together at one row
#   gates     the GPU pinned recording (its replays: serve.expert_ring=1 and serve.proj_ring=1
#             and 2 among them), test_gemm_lt's proj_ring gates (G4_GEMM_GATES=proj_ring),
#             test_moe (the expert_ring gates: the ring against the register groups, byte for
#             byte)
#   pinned    (not in the default) the GPU pinned replays of `gates` alone
#   sweep     the bf16-pool attention switches still off, 0 against 1 at 1 and 16 rows
ring_want() { [[ " ${RING_STEPS:-build ab gates sweep} " == *" $1 "* ]]; }
# shellcheck source=/dev/null
. tests/gpu/plans/bench26.sh
# RING_ROWS (default "1 16" for the experts' ring, "1 4" for the projections'): one size, e.g.
# RING_ROWS=1, when a call's time is short
ring_ab() {
    local r b v
    for r in 1 2; do
        for b in ${RING_ROWS:-1 16}; do
            for v in 0 1; do
                bench26 "$b rows, expert_ring $v, round $r" --set serve.expert_ring=$v \
                    --batch $b --prompt 1024 --steps 32
            done
        done
        for b in ${RING_ROWS:-1 4}; do
            for v in 0 1 2; do
                bench26 "$b rows, proj_ring $v, round $r" --set serve.proj_ring=$v \
                    --batch $b --prompt 1024 --steps 32
            done
        done
        bench26 "1 rows, expert_ring 1, proj_ring 2, round $r" --set serve.expert_ring=1 \
            --set serve.proj_ring=2 --batch 1 --prompt 1024 --steps 32
    done
}
ring_sweep() {
    local sw b v
    for sw in attn_half_units attn_global_keep attn_early_lookup; do
        for b in 1 16; do
            for v in 0 1; do
                bench26 "$b rows, $sw $v, round 1" --set serve.$sw=$v --batch $b --prompt 1024 \
                    --steps 32
            done
        done
    done
}
ring_want build && step build ./build.sh tests
ring_want record && step ring-record bash -c "BUILD_DIR=build python3 tests/proto/test_pinned.py \
    --backend gpu --record tests/pinned && cp tests/pinned/gpu-tiny-moe.jsonl '$Q/logs/'"
ring_want ab && step ring-ab ring_ab
{ ring_want gates || ring_want pinned; } && step ring-pinned ./build.sh gpu-test pinned_composition
ring_want gates && step ring-gemm env G4_GEMM_GATES=proj_ring ./build.sh gpu-test test_gemm_lt
ring_want gates && step ring-moe ./build.sh gpu-test test_moe
ring_want sweep && step ring-sweep ring_sweep
