# tests/gpu/plans/next-session.sh - a box_queue.sh plan for the next session's device time,
# written by the twenty-sixth to thirtieth sessions (carry .deps; follow `start` with `wait`
# calls back to back, each shorter than the call's limit: a machine idle for 30 s goes back with
# the plan; no .prebuilt is needed since the attention's six parts: the box builds everything in
# ~110-170 s).
# PLAN_STEPS picks; default "pinned 26b-fp8 attn long": the GPU pinned replays (pinned.sh; the
# thirty-seventh session's last commits moved the prep's block form, which decode runs, into
# shared helpers without a GPU run: the replays hold its bytes to the recording), the 26B-A4B's
# full step, fp8 then bf16 (the H100 ran it at tree 0a5a465 with strided tiles on: 38 / 2, the
# fp8 one-token prompt's known flip; not since serve.attn_prep_rows; its checkpoint made from
# the start where the card has over 100 GB), then the whole test_attn (after the full step: on an
# 80 GB H100 it does not fit beside the full step's torch make), then `long` (below: the long
# prompts' prefill, for the global layers' reckoning); the thirty-seventh session ran
# full-first.sh and prep-rows.sh (H100);
# the thirty-sixth session ran pe-gates and pe-ab (H100: passed; the size classes slower, since
# taken out) and tests/gpu/plans/strided-flash.sh (the strided tiles' gates and A/B, flash's A/B);
# `pinned` (tests/gpu/plans/pinned.sh) re-makes or replays the GPU pinned recording; the thirty-fifth session ran `ring` (the decode rings'
# A/B, both measured slower and taken out, and the attention switches' sweep) on an H100; the
# thirty-fourth ran `bt` (tests/gpu/plans/branches-tiles.sh) there but for its 31B part and
# ncu's 16 rows; the thirty-third ran `pe`;
# `serve`, the serving A/B, when a second session's time allows;
# docs/perf-notes.md, "Next H200 calls"; the thirtieth session ran attn-nan, wg, serve, lt-probe
# and timeline, the thirty-first prompt-gemm.sh on an H100, the thirty-second pgates and pe (the
# strided form) there). Never start it from inside $Q/tree: `start` empties $Q first. The steps,
# in the order they run
# (probe, lt-probe, pf, attn and attn-nan are described beside their code below):
#   gates    (ran in the twenty-eighth session, 1,635 / 0 / 0) test_gemm_lt and test_moe's
#            `moe_prefill_ring` gates (serve.moe_prefill_tiles = 3: the staged experts in a
#            three-stage ring, idle warps skipping, bits against 0); then
#            test_attn, its `early lookup` gates among them (serve.attn_early_lookup: page-table
#            look-ups before the grid wait) and the fold-NaN paths' third variant; the build
#            included, ~8 min
#   ab       bench_decode, two rounds, bf16 pool: attn_early_lookup 0 against 1 at 16 and 1
#            26B-A4B rows and 16 31B rows (on by default since the thirty-fifth session, which
#            measured the 26B-A4B; predicted -0.03 to -0.09 ms at one row, little at 16;
#            serve.attn_half_units and serve.attn_global_keep, A/B'd here before, measured no
#            faster that session and were taken out); then one 1,024-token
#            prefill of each of the 26B-A4B and the 31B with its whole per-op breakdown (issue 22:
#            where the ~31 ms of a 26B-A4B chunk outside attention and experts go), two rounds,
#            and bench_gemm --kernels (each projection shape at 1,024 and 2,048 rows on the tile
#            form and cuBLASLt, ms and TFLOP/s), and
#            moe_prefill_tiles 2 against 3 on the 26B-A4B's prefill (two rounds; predicted its
#            experts 34.5 -> ~27-31 ms), ~7 min
#            (read the step's log with tests/gpu/ab_table.py: one row a setting, a column a run)
#   pe-gates serve.prompt_experts (off: the H100's full step failed its 32,752-token bf16 prompt
#            with it on, a chaotic step where HF's own variants differ by 2.84 nats): the engine
#            gates and the trained fixtures' sharp gates with it on (G4_FIXTURE_SET), and
#            test_moe, its whole-chunk gate among them (2,048 rows, more tiles than the batched
#            plans were asked at), ~6 min
#   26b-pe   the 26B-A4B's full step again with serve.prompt_experts on (FULL_SETS), after
#            26b-fp8 on the same checkpoint: whether the H100's failure is the card's, ~2 min
#   26b      the 26B-A4B's full step with this tree's defaults (attn_fp8_frags and the staged
#            prefill experts on since the twenty-sixth session; the full step has not run with
#            them), ~8 min
#   serve    release/bench.py, bf16 against fp8, c = 1, 4, 16, two ABBA rounds, 26B-A4B: the
#            serving figures of record date from tree efbd397 (issue 21's targets are read
#            there), ~4 min; results under $Q/logs/serve-results
#   e4b      (not in the default) the E4B's, ~4.5 min
#   e2b      (not in the default) the E2B's, ~3.5 min
#   geometry (not in the default) the geometry gates, ~5 min
#   timeline (not in the default) tests/gpu/plans/timeline.sh's trace of graphed decode steps,
#            the first since tree 0a00620 (~4 min)
#   encu     (not in the default) ncu over the staged experts and the query-tile attention of a
#            1,024-token 26B-A4B prefill (E2 reached 34.5 ms where 25-30 was predicted; the
#            tiles 20 ms where 10-15), ~4 min
#   31b      (not in the default) the 31B's full step, ~20 min with its make: a call of its own
want() { [[ " ${PLAN_STEPS:-pinned 26b-fp8 attn long} " == *" $1 "* ]]; }
# the 26B-A4B's full checkpoint and HF references (torch, ~5 min; the full step makes them itself
# when absent) beside the gates only where the card holds both: on an 80 GB H100 the make's
# torch model left the gates no memory (the thirty-first session), so there the full step makes
# them in turn. The benchmarks wait for it (a 26B-A4B engine beside the torch model).
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if { want 26b-fp8 || want 26b || want 26b-pe; } && [ "${mib:-0}" -gt 100000 ]; then
    step make26 env python3 tests/full/full_step.py make --model 26b-a4b \
        --dir /dev/shm/g4full/26b-a4b --pools "fp8 bf16" &
fi
await_make() { [ -f "$Q/logs/make26.time" ] && await make26; return 0; }
want pe-gates && step pe-build ./build.sh tests
want pe-gates && step pe-gates env G4_FIXTURE_SET="serve.prompt_experts=1" \
    ./build.sh gpu-test engine_vs_hf trained
want pe-gates && step pe-moe ./build.sh gpu-test test_moe
# pe-ab: the prompt experts in tiles of 96 against the default path (prompt experts off), one
# 1,024-token prompt and one 2,048-token prompt (one chunk each at the 26B-A4B's prefill_chunk),
# two rounds (the thirty-sixth session's H100: the last chunk's experts 31.3 -> 22.8 ms at 1,024
# tokens, 51.0 -> 29.3 at 2,048; the size classes it also ran, serve.prompt_tile 0, were slower
# and were taken out), ~1.5 min
pe_ab() {
    local r p v
    for r in 1 2; do
        for p in 1024 2048; do
            for v in off 96; do
                echo "== prefill $p, prompt experts $v, round $r"
                if [ $v = off ]; then set -- --set serve.prompt_experts=0; else
                    set -- --set serve.prompt_experts=1 --set serve.prompt_tile=$v; fi
                timeout 120 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                    --set model.weights=dummy --set serve.max_context=4096 "$@" --batch 1 \
                    --prompt $p --steps 4 | grep -E "^prefill|^prompt experts|^experts"
            done
        done
    done
}
want pe-ab && step pe-ab bash -c "$(declare -f pe_ab); pe_ab"
# (not in the default) the GPU pinned recording's replays, or with PIN_STEPS=record its re-making
if want pinned; then
    # shellcheck source=/dev/null
    . tests/gpu/plans/pinned.sh
fi
# the switches of the thirty-second and thirty-third sessions (the plan's own header), ~6 min
# with the objects carried; BT_STEPS picks among its steps
if want bt; then
    # shellcheck source=/dev/null
    . tests/gpu/plans/branches-tiles.sh
fi
# serve.prompt_gemm on the card of record (written and gated on an H100 in the thirty-first
# session): its gates, the GPU pinned recording made there replayed with every speed switch, then
# prompt-gemm.sh's A/B (prefill 0 against 1, two rounds), ~12 min with the build
# the thirty-second session's first call: serve.prompt_gemm's gates and serve.prompt_experts' gates in
# one build (test_moe's moe_prompt_experts among them), the pinned recording replayed with every
# speed switch; then `pe-engine` and `pe-ab` (PLAN_STEPS="pgates pe"), ~12 min
want pgates && step pgates ./build.sh gpu-test test_gemm_lt test_moe engine_vs_hf trained \
    pinned_composition
if want prompt; then
    step prompt ./build.sh gpu-test test_gemm_lt engine_vs_hf trained pinned_composition
    # shellcheck source=/dev/null
    (PLAN_STEPS=ab && . tests/gpu/plans/prompt-gemm.sh)
fi
want gates && step gates ./build.sh gpu-test test_gemm_lt test_moe test_attn
# the tensor-core order probe (tests/gpu/probe_tc_order.cu), alone: nvcc and one run, ~30 s
want probe && step probe bash -c 'mkdir -p build/tests && nvcc -std=c++17 \
    -gencode arch=compute_90a,code=sm_90a -O2 -I. tests/gpu/probe_tc_order.cu \
    -o build/tests/probe_tc_order && build/tests/probe_tc_order'
# (`pe` and `br`, serve.prompt_experts' tile form and serve.moe_branches alone, were here: `pe`
# ran in the thirty-third session, and `bt` above measures and gates both, with the prompt tile)
# (not in the default) whether cuBLASLt's plans sum k as one natural 16-k instruction after another
# (tests/gpu/probe_lt_order.cu; docs/perf-notes.md, thirtieth session): nvcc and one run, ~40 s
want lt-probe && step lt-probe bash -c 'mkdir -p build/tests && nvcc -std=c++17 \
    -gencode arch=compute_90a,code=sm_90a -O2 -I. tests/gpu/probe_lt_order.cu \
    -o build/tests/probe_lt_order -L/usr/local/cuda/lib64 -lcublasLt \
    -Xlinker -rpath=/usr/local/cuda/lib64 && build/tests/probe_lt_order'
ab_next() {
    local r m v
    for r in 1 2; do
        echo "-- round $r"
        for m in "gemma4-26b-a4b 16" "gemma4-26b-a4b 1" "gemma4-31b 16"; do
            set -- $m
            for v in 0 1; do
                echo "== $1, $2 rows, bf16 pool, attn_early_lookup $v"
                timeout 150 build/tests/bench_decode -c conf/$1.ini \
                    --set model.weights=dummy --set serve.max_context=4096 \
                    --set serve.attn_early_lookup=$v --batch $2 --prompt 1024 --steps 32 |
                    grep -E "^decode step|^attention"
            done
        done
    done
    for m in gemma4-26b-a4b gemma4-31b; do
        echo "== $m, one 1,024-token prompt, round 1" # round 1: the whole breakdown
        timeout 200 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
            --set serve.max_context=4096 --batch 1 --prompt 1024 --steps 8
    done
    for m in gemma4-26b-a4b gemma4-31b; do
        echo "== $m, one 1,024-token prompt, round 2"
        timeout 200 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
            --set serve.max_context=4096 --batch 1 --prompt 1024 --steps 8 |
            grep -E "^prefill|^decode step"
    done
    for r in 1 2; do
        for v in 2 3; do
            echo "== gemma4-26b-a4b, one 1,024-token prompt, moe_prefill_tiles $v, round $r"
            timeout 200 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=4096 \
                --set serve.moe_prefill_tiles=$v --batch 1 --prompt 1024 --steps 8 |
                grep -E "^prefill|^decode step|expert"
        done
    done
    echo "== bench_gemm --kernels"
    timeout 200 build/tests/bench_gemm --kernels
}
want ab && step ab bash -c "$(declare -f ab_next); ab_next"
pf_next() {
    # the prefill forms alone, when a session's device time is short: both large models, each
    # setting twice in alternation (26B-A4B first: its breakdown is issue 22's target)
    local r m v
    for r in 1 2; do
        for m in gemma4-26b-a4b gemma4-31b; do
            for v in "serve.attn_longest_first=0" "serve.attn_longest_first=1" \
                "serve.attn_stats_together=1" \
                "serve.attn_longest_first=1 --set serve.attn_stats_together=1" \
                "serve.attn_tile_fold=1" \
                "serve.attn_longest_first=1 --set serve.attn_stats_together=1 --set serve.attn_tile_fold=1" \
                "serve.moe_prefill_tiles=2"; do
                [ "$m" = gemma4-31b ] && [[ $v == *moe* ]] && continue
                echo "== $m, one 1,024-token prompt, $v, round $r"
                timeout 200 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                    --set serve.max_context=4096 --set $v --batch 1 --prompt 1024 --steps 8
            done
        done
    done
    echo "== bench_gemm --kernels"
    timeout 200 build/tests/bench_gemm --kernels
}
#   pf       (not in the default) the build and the prefill forms' A/B alone, two rounds:
#            attn_longest_first 0 against 1 (written in the twenty-eighth session: the query
#            tiles' blocks longest first; predicted the 26B-A4B chunk's attention 20.35 -> ~18-19
#            ms, from a list-scheduling model of the passes), attn_stats_together (a warp's rows'
#            statistics side by side; predicted -2 to -4 ms), both, attn_tile_fold (the splits
#            combined in the P.V pass; predicted -1.5 to -2 ms) and all three, on both large
#            models, and the 26B-A4B
#            at moe_prefill_tiles 2 (the default before the twenty-eighth session: 31.5 against
#            34.4 ms of experts there), then bench_gemm --kernels; ~3 min with its build
want pf && step pf-build ./build.sh tests
want pf && step pf bash -c "$(declare -f pf_next); pf_next"
#   attn     (not in the default) test_attn alone (its `longest first` gates among them), ~3 min
want 26b && await_make && step full-26b env FULL_MODELS="26b-a4b" ./build.sh gpu-test full
# (the default) the same with the fp8 pool's checks first: the half that has not come back
# on the query-tile defaults, for a call too short for both
want 26b-fp8 && await_make && step full-26b-fp8 env FULL_MODELS="26b-a4b" FULL_POOLS="fp8 bf16" \
    ./build.sh gpu-test full
want 26b-pe && await_make && step full-26b-pe env FULL_MODELS="26b-a4b" FULL_POOLS="bf16 fp8" \
    FULL_SETS="serve.prompt_experts=1" ./build.sh gpu-test full
# (not in the default) test_attn's fold NaN paths alone, on the tensor-core passes (~1 min after a
# build): the one group of its gates the twenty-ninth session's first call did not reach
want attn-nan && step attn-nan env G4_ATTN_GATES=nan_paths ./build.sh gpu-test test_attn
# (`wg`, the wgmma projections' and experts' gates and A/B, ran in the thirtieth session; both
# forms lost and were taken out)
want attn && step attn ./build.sh gpu-test test_attn
# long: one 26B-A4B prompt of 8,192, 16,384 and 32,752 tokens (bench_decode, dummy weights),
# prompt experts off and on: the prefill's wall time and its last chunk's breakdown, to check the
# thirty-seventh session's reckoning (docs/attention-design.md, "Long prompts: the global
# layers": ~4.4 s of a 32,752-token prompt's ~6.4 s in the global layers on the H100), ~2 min
long_prompts() {
    local p v
    for p in 8192 16384 32752; do
        for v in 0 1; do
            echo "== prefill $p, prompt experts $v"
            timeout 200 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini \
                --set model.weights=dummy --set serve.max_context=32768 \
                --set serve.prompt_experts=$v --batch 1 --prompt $p --steps 2 |
                grep -E "^prefill|^attention|^experts"
        done
    done
}
want long && step long bash -c "$(declare -f long_prompts); long_prompts"
want serve && step serve python3 release/bench.py -c conf/gemma4-26b-a4b.ini --rounds 2 \
    --a-label bf16 --a-set kv.local=bf16 --b-label fp8 --b-set kv.local=fp8 \
    --out "$Q/logs/serve-results"
want e4b && step full-e4b env FULL_MODELS="e4b" ./build.sh gpu-test full
want e2b && step full-e2b env FULL_MODELS="e2b" ./build.sh gpu-test full
want geometry && step geometry ./build.sh gpu-test geometry
if want timeline; then
    # shellcheck source=/dev/null
    . tests/gpu/plans/timeline.sh
fi
encu() {
    # the prefill's kernels only: no --profile-from-start off (it would keep only the profiled
    # decode step)
    # (skip 0: layer 0's two passes and layer 1's, windowed; the tiles' skip 10: layer 5's,
    # the first global layer, whose passes score again from K)
    local k skip
    for k in moe_staged_kernel attn_mma_tile_kernel attn_mma_tile_kernel:10; do
        skip=0
        [[ $k == *:* ]] && skip=${k#*:} && k=${k%%:*}
        echo "== $k, launches from $skip"
        timeout 200 ncu --clock-control none \
            --kernel-name "regex:$k" --launch-skip "$skip" --launch-count 4 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats \
            --section MemoryWorkloadAnalysis --section SchedulerStats \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.cuda_graphs=0 --batch 1 --prompt 1024 \
            --steps 1
    done
}
want encu && step encu-build ./build.sh gpu-test test_sample # builds bench_decode
want encu && step encu bash -c "$(declare -f encu); encu"
want 31b && step full-31b env FULL_MODELS=31b ./build.sh gpu-test full
