# tests/gpu/plans/spb-waves.sh - a box_queue.sh plan (twenty-fifth session): the tensor-core
# attention's splits a block chosen by whole waves of its resident blocks (attn_mma_slots), with
# serve.attn_query_tiles at 64 by default. test_attn (every launch choice bit-equal to forced
# 1, 2, 3, 16 splits a block), bench_decode paired within one build (the launcher's choice, 0,
# against forced counts that reproduce the old choices), the pinned replays, then the full
# steps the twenty-fourth session left: the 26B-A4B's fp8 mixed cases and the E2B. ~13 min.
spb_waves_ab() {
    local r m b rows pool
    for r in 1 2; do
        echo "-- round $r"
        for m in "gemma4-26b-a4b 16 bf16 0 2 4" "gemma4-26b-a4b 16 fp8 0 2 4" \
            "gemma4-26b-a4b 4 bf16 0 1" "gemma4-26b-a4b 1 bf16 0" "gemma4-31b 16 bf16 0 2 4" \
            "gemma4-31b 1 bf16 0"; do
            set -- $m
            local model=$1
            rows=$2
            pool=$3
            shift 3
            for b in "$@"; do
                echo "== $model, $rows rows, $pool pool, attn_splits_per_block $b"
                timeout 150 build/tests/bench_decode -c conf/$model.ini --set model.weights=dummy \
                    --set serve.max_context=4096 --set kv.local=$pool \
                    --set serve.attn_splits_per_block=$b --batch $rows --prompt 1024 --steps 32 |
                    grep -E "^decode step|^prefill:|^attention"
            done
        done
    done
}
step gates ./build.sh gpu-test test_attn
step ab bash -c "$(declare -f spb_waves_ab); spb_waves_ab"
step pinned ./build.sh gpu-test pinned_composition
step full-26b-fp8-mixed env FULL_MODELS="26b-a4b" FULL_POOLS=fp8 FULL_MODES=mixed ./build.sh gpu-test full
step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
