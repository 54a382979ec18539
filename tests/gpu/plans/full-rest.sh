# tests/gpu/plans/full-rest.sh - a box_queue.sh plan (sourced in the tree copy): the full
# step's remaining cases (issue 18), the GPU soak (issue 23) and serve.attn_fold's gates and
# speed (issue 21) on one warm machine, ~23 min.
#   lane 1: the E4B fp8 make, then (once lane 2 is done with the GPU) the 31B make (both pools,
#           HF at 60 layers, ~100 GB of GPU at its peak, so alone on the card; floors sdpa,
#           batch 2 and split-K in two parts: a floor fewer is a stricter rule, and ~100 s less),
#           then the 31B checks one after the other
#   lane 2: the build beside the E4B make; then the soak at the 26B-A4B's size (its engine
#           ~55 GB) and the E4B check (its engine held to kv.budget_gb=6, on a copy of the
#           binary since every build.sh run relinks build/g4pipe) beside each other
full=/dev/shm/g4full
ft=tests/full/full_step.py
mkdir -p build/full
lane2() {
    step build ./build.sh tests || { echo 1 > "$Q/logs/e4b-fp8.rc"; echo 1 > "$Q/logs/soak.rc"; return; }
    cp build/g4pipe /dev/shm/g4pipe-queue
    # serve.attn_fold (off by default until measured): its op gates and the pinned recording
    # with it on, run directly (build.sh would relink build/g4pipe under the soak)
    step attn-fold bash -c 'build/tests/test_attn; BUILD_DIR=build PINNED_SET=serve.attn_fold=1 \
        python3 tests/proto/test_pinned.py --backend gpu'
    step soak timeout 300 ./build.sh gpu-test reliability dummy_weights &
    await e4b-make
    step e4b-fp8 python3 $ft check --model e4b --dir $full/e4b --binary /dev/shm/g4pipe-queue \
        --conf conf/gemma4-e4b.ini --pool fp8 --set kv.budget_gb=6 \
        --log build/full/g4pipe-e4b-fp8.stderr --table build/full/table.jsonl
    rm -rf $full/e4b
    await soak
    # a soak cut by its timeout leaves its engine behind, holding ~55 GB the 31B make needs
    pkill -f tests/proto/test_soak.py; pkill -f model.weights=dummy; sleep 3
}
lane2 &
step e4b-make python3 $ft make --model e4b --dir $full/e4b --pools fp8
await e4b-fp8 soak
# build.sh's full step finds the reference made and does not make it again
if step 31b-make python3 $ft make --model 31b --dir $full/31b --pools "bf16 fp8" \
        --floors "sdpa batch2 splitk"; then
    step 31b-fp8 env FULL_MODELS=31b FULL_POOLS=fp8 ./build.sh gpu-test full
    step 31b-bf16-mixed env FULL_MODELS=31b FULL_POOLS=bf16 FULL_MODES=mixed ./build.sh gpu-test full
fi
rm -rf $full
# the fold's speed, if the machine is still held: one 26B-A4B row and 16, off then on
bench_fold() {
    local b f
    for b in 1 16; do for f in 0 1; do
        echo "attn_fold=$f batch $b: $(timeout 60 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
            --set model.weights=dummy --set serve.max_context=4096 --set serve.attn_fold=$f \
            --batch $b --prompt 1024 --steps 16 2>&1 | grep -v "^g4pipe: " | head -4)"
    done; done
}
step bench-fold bench_fold
