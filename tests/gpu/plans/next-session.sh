# tests/gpu/plans/next-session.sh - a box_queue.sh plan, ~20 min, for the twentieth session's
# device time, written by the nineteenth: what it built and could not run, then the full step
# of the models its changes did not reach.
#   timeline.sh       the trace build's per-kernel timeline of graphed decode steps (~4 min)
#   prefill-tiles.sh  test_moe and the pinned replays (the prefill tiles and the refactored
#                     combine among them), the prefill A/B (~6 min)
#   attn              test_attn (the shared combine sum, softmax_p)
#   full              the E2B and E4B full steps (~8 min)
. tests/gpu/plans/timeline.sh
. tests/gpu/plans/prefill-tiles.sh
step attn ./build.sh gpu-test test_attn
step full env FULL_MODELS="e2b e4b" ./build.sh gpu-test full
