# tests/gpu/plans/attn-mma-default.sh - a box_queue.sh plan (twenty-fourth session): serve.attn_mma
# on by default. The GPU pinned recording re-made with it (its bits move: other fp32 summation
# orders in attention) and copied into the logs, the engine gates and the pinned replays (the
# speed switches against the new recording), a second paired bench round, then the full steps.
# PLAN_STEPS picks; default "record gates ab 26b e2b".
plan_steps=${PLAN_STEPS-}
PLAN_STEPS=none
. tests/gpu/plans/attn-mma.sh # defines mma_ab (and its own want), runs nothing
PLAN_STEPS=$plan_steps
want() { [[ " ${PLAN_STEPS:-record gates ab 26b e2b} " == *" $1 "* ]]; }
want record && step pinned-record bash -c "./build.sh && BUILD_DIR=build python3 tests/proto/test_pinned.py --backend gpu --record tests/pinned && cp tests/pinned/gpu-tiny-moe.jsonl $Q/logs/"
want gates && step default-gates ./build.sh gpu-test engine_vs_hf trained pinned_composition
want ab && step mma-ab2 bash -c "$(declare -f mma_ab); mma_ab"
want 26b && step full-26b env FULL_MODELS="26b-a4b" ./build.sh gpu-test full
want e2b && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
