# tests/gpu/plans/pinned.sh - a box_queue.sh plan, alone or as next-session.sh's `pinned`: the GPU
# pinned recording, re-made or replayed (it was ring.sh, whose A/B and gates of the decode rings
# went with serve.expert_ring and serve.proj_ring). Carry .deps and .prebuilt
# (tests/gpu/prebuilt.sh). PIN_STEPS picks (default "build pinned"):
#   build     ./build.sh tests (links, where the carried objects are current)
#   record    (not in the default) the GPU pinned recording re-made at this tree's defaults, for a
#             commit that moves its bits and says why (the thirty-fifth session made one with
#             serve.prompt_experts on, which then stayed off); `pinned` then replays against it, and the file comes back in the logs
#   pinned    the GPU pinned replays (build.sh's list: as set, then each speed switch at its other
#             setting)
pin_want() { [[ " ${PIN_STEPS:-build pinned} " == *" $1 "* ]]; }
pin_want build && step build ./build.sh tests
pin_want record && step pin-record bash -c "BUILD_DIR=build python3 tests/proto/test_pinned.py \
    --backend gpu --record tests/pinned && cp tests/pinned/gpu-tiny-moe.jsonl '$Q/logs/'"
pin_want pinned && step pinned ./build.sh gpu-test pinned_composition
