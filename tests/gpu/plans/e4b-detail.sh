# tests/gpu/plans/e4b-detail.sh - a box_queue.sh plan, ~3 min (carry .deps): the E4B case at
# 2,047 tokens whose fp8 gap follows the projections' kernel (debug.gemm mma 0.734, cublaslt
# 0.188; HF's own orders 0.14-0.32), step by step (full_step check --detail), under both pools,
# to see whether the mma kernel's gap lies in one step and one id (order noise) or in all
# (a systematic difference)
. tests/gpu/plans/next-31b-fold.sh --functions-only
mkdir -p build/full
step bin nice -n 5 ./build.sh &
diag=/dev/shm/g4diag/e4b
step e4b-make python3 $ft make --model e4b --dir $diag --pools "bf16 fp8" --lengths 2047 \
    --floors "sdpa splitk splitk4"
await bin
for pool in fp8 bf16; do
    for g in mma cublaslt; do
        step e4b-$pool-$g python3 $ft check --model e4b --dir $diag --binary build/g4pipe \
            --conf conf/gemma4-e4b.ini --pool $pool --modes alone --set debug.gemm=$g --detail \
            --label /$g --log build/full/e4b-$pool-$g.stderr
    done
done
rm -rf /dev/shm/g4diag
