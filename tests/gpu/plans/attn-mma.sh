# tests/gpu/plans/attn-mma.sh - a box_queue.sh plan (twenty-fourth session): serve.attn_mma, the
# attention passes with their products on tensor cores (kernels/attn_mma.cuh). PLAN_STEPS picks;
# default "gates ab engine", in order:
#   gates   test_attn: every case on the CUDA-core kernels and again with attn_mma on, each
#           against the CPU reference (1e-2) and its speed switches (bits), ~2 min with the build
#   ab      bench_decode attn_mma 0 against 1: the 26B-A4B at 1 and 16 rows (decode step, the
#           1,024-token prefill and their attention lines), the 31B at 1 row; fp8 pool at 16
#   engine  the tiny and trained fixtures' engine gates (HF gaps, batch invariance, KLD) with
#           attn_mma on (G4_FIXTURE_SET)
want() { [[ " ${PLAN_STEPS:-gates ab engine} " == *" $1 "* ]]; }
want gates && step mma-gates ./build.sh gpu-test test_attn
mma_ab() {
    local mb m b mma kv
    for mb in gemma4-26b-a4b:1:bf16 gemma4-26b-a4b:16:bf16 gemma4-26b-a4b:16:fp8 gemma4-31b:1:bf16; do
        IFS=: read -r m b kv <<< "$mb"
        for mma in 0 1; do
            echo "== attn_mma $mma, $m batch $b kv.local $kv"
            timeout 120 build/tests/bench_decode -c conf/$m.ini \
                --set model.weights=dummy --set serve.max_context=4096 --set kv.local=$kv \
                --set serve.attn_mma=$mma --batch $b --prompt 1024 --steps 32 |
                grep -E "^decode step|^prefill:|^prefill|attention|^attn"
        done
    done
}
want ab && step mma-ab bash -c "$(declare -f mma_ab); for r in \$(seq \${AB_ROUNDS:-1}); do echo \"-- round \$r\"; mma_ab; done"
want engine && step mma-engine env G4_FIXTURE_SET=serve.attn_mma=1 ./build.sh gpu-test engine_vs_hf trained
