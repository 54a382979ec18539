# tests/gpu/plans/full-rest.sh - a box_queue.sh plan (sourced in the tree copy): the full
# step's remaining cases (issue 18) and the GPU soak (issue 23) on one warm machine, ~25 min.
#   lane 1: E4B fp8 make, then the 31B make (both pools, HF at 60 layers, ~100 GB of GPU at
#           its peak), then the 31B checks one after the other, then the soak at 26B-A4B size
#   lane 2: the build beside the E4B make, the E4B check beside the 31B make's first minutes
#           (its engine held to kv.budget_gb=6 and a copy of the binary, since every
#           build.sh run relinks build/g4pipe), then the short GPU gates
full=/dev/shm/g4full
ft=tests/full/full_step.py
lane2() {
    step build ./build.sh tests || { echo 1 > "$Q/logs/gates.rc"; return; }
    cp build/g4pipe /dev/shm/g4pipe-queue
    await e4b-make
    step e4b-fp8 python3 $ft check --model e4b --dir $full/e4b --binary /dev/shm/g4pipe-queue \
        --conf conf/gemma4-e4b.ini --pool fp8 --set kv.budget_gb=6 \
        --log build/full/g4pipe-e4b-fp8.stderr --table build/full/table.jsonl
    rm -rf $full/e4b
    step gates ./build.sh gpu-test test_gemm_lt test_ops test_attn test_moe test_fill \
        test_sample pinned_composition trained engine_vs_hf
}
mkdir -p build/full
lane2 &
step e4b-make python3 $ft make --model e4b --dir $full/e4b --pools fp8
# a failed make is not made again by build.sh's full step: the checks wait for the next call
if step 31b-make python3 $ft make --model 31b --dir $full/31b --pools "bf16 fp8"; then
    await gates
    step 31b-fp8 env FULL_MODELS=31b FULL_POOLS=fp8 ./build.sh gpu-test full
    step 31b-bf16-mixed env FULL_MODELS=31b FULL_POOLS=bf16 FULL_MODES=mixed ./build.sh gpu-test full
fi
await gates
rm -rf $full
step soak ./build.sh gpu-test reliability dummy_weights
