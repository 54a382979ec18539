#!/usr/bin/env bash
# tests/gpu/plans/full-pair.sh - one device call: the 26B-A4B's full step (both pools, the fp8
# pool first: its reference holds the eager-experts floor since the fortieth session, so its
# known one-token flip is judged again) with FULL_PAIR's serve.attn_pair_tiles form (default 2),
# run in the tree itself (no queue). Carry .deps and build/g4pipe (a GPU build of this tree from
# a CUDA 13.0 host): G4_PREBUILT=1 skips the box's ~150 s build where its libraries resolve.
# FULL_PAIR_POOLS picks the pools ("fp8 bf16"). Logs under $OUT: full.log.
. tests/gpu/plans/preamble.sh
prebuilt=0
[ -x build/g4pipe ] && ! ldd build/g4pipe | grep -q "not found" && prebuilt=1
echo "carried binary: $prebuilt"
FULL_MODELS=26b-a4b FULL_POOLS="${FULL_PAIR_POOLS:-fp8 bf16}" G4_PREBUILT=$prebuilt \
    FULL_SETS="serve.attn_pair_tiles=${FULL_PAIR:-2}" timeout 580 ./build.sh gpu-test full \
    > "$OUT/full.log" 2>&1
echo "full step: exit $? at $((SECONDS - t0)) s"
grep -E "^(PASS|FAIL|SKIP)|passed|floor" "$OUT/full.log" | cut -c1-260 | tail -40
