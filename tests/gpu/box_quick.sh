#!/usr/bin/env bash
# tests/gpu/box_quick.sh - one device call in a fixed order, so the cheapest evidence comes back
# first if the call runs out of time: build, the op gates and the tiny-fixture engine gates,
# the decode benchmark, then the geometry gates (bounded by what is left of DEADLINE seconds).
# Logs under $OUT; the gate programs' stderr is copied there too.
# Usage: tests/gpu/box_quick.sh [nogates|noopgates] [demo] [pinned] [racecheck] [nobench]
#        [graphs] [ncu] [pools] [racecheck-fixtures] [gemm] [fp8] [sanitize] [ab] [nogeometry]
# (racecheck: RACECHECK programs, RACECHECK_OPTS e.g. "--kernel-name kns=attn_window" to check
#  only those kernels (the rest run uninstrumented), RACECHECK_TIMEOUT seconds each, default 100;
#  ncu: one 16-row 26B-A4B step's NCU_KERNELS, default the attention and expert kernels;
#  pools: BENCH_CASES under kv.local bf16 and fp8; racecheck-fixtures: sanitize_fixtures.sh
#  with GATES, SANITIZE_BI_MAX_LEN and SANITIZE_TIMEOUT, by default what is left of DEADLINE)
# (ab: the fp8-vs-bf16 serving A/B into $OUT/ab, AB_ROUNDS rounds (default 3) of AB_MODELS
#  (default both); BENCH_CASES "model:rows ..." narrows the decode benchmark;
#  GEOMETRY_MODELS, GEOMETRY_WAYPOINTS (build.sh) and GEOMETRY_GATES (test_fixtures'
#  G4_FIXTURE_GATES) narrow the geometry step)
set -u
DEADLINE=${DEADLINE:-540}
. tests/gpu/box_common.sh
stamp build; ./build.sh > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -1 "$OUT/build.log"
ldd build/g4pipe | grep -v -E "vdso|ld-linux"
case " $* " in *" noopgates "*) ;; # the binary alone (the serving A/B needs nothing else)
    *" nogates "*) # builds the test programs; attention's op gate only
    stamp "op gates: attention and argmax"
    ./build.sh gpu-test test_attn test_sample > "$OUT/gpu-test.log" 2>&1
    grep -E "^(FAIL|SKIP)" "$OUT/gpu-test.log" | cut -c1-300; tail -1 "$OUT/gpu-test.log" ;; *)
    stamp "op gates + tiny fixtures + dummy weights"
    ./build.sh gpu-test test_gemm_lt test_ops test_attn test_moe test_fill test_sample \
        engine_vs_hf dummy_weights pinned_composition > "$OUT/gpu-test.log" 2>&1
    grep -E "^(FAIL|SKIP)" "$OUT/gpu-test.log" | cut -c1-300; tail -1 "$OUT/gpu-test.log"
    grep -h "device\|engine" build/tests/dummy.stderr 2>/dev/null | head -3 ;;
esac
case " $* " in *" demo "*)
    stamp "16 requests piped at once, a 17th mid-run (26B-A4B, dummy weights)"
    G4_CONF=conf/gemma4-26b-a4b.ini G4_SET="model.weights=dummy serve.max_context=4096" \
        timeout 150 python3 tests/proto/test_batching.py > "$OUT/demo.log" 2>&1
    grep -E "^(PASS|FAIL)|^stats" "$OUT/demo.log" | cut -c1-600 ;;
esac
case " $* " in *" pinned "*) # only to make a new recording: gpu-test compares with the committed one
    stamp "pinned composition: record the GPU bf16 answers, then replay against them"
    BUILD_DIR=build timeout 200 python3 tests/proto/test_pinned.py --backend gpu \
        --record "$OUT/pinned" 2>&1 | cut -c1-400 ;;
esac
case " $* " in *" racecheck "*)
    stamp "racecheck: op gates ${RACECHECK:-test_attn test_moe}"
    for t in ${RACECHECK:-test_attn test_moe}; do
        timeout "${RACECHECK_TIMEOUT:-100}" compute-sanitizer --tool racecheck ${RACECHECK_OPTS:-} \
            build/tests/$t > "$OUT/racecheck_$t.log" 2>&1
        echo "$t rc $?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|Race reported" "$OUT/racecheck_$t.log" |
            sort | uniq -c | head -6 | cut -c1-250
        tail -1 "$OUT/racecheck_$t.log"
    done ;;
esac
case " $* " in *" nobench "*) ;; *)
    stamp bench
    for mb in ${BENCH_CASES:-gemma4-26b-a4b:1 gemma4-26b-a4b:4 gemma4-26b-a4b:16 gemma4-31b:1 gemma4-31b:16}; do
        m=${mb%:*} b=${mb#*:}
        timeout 80 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
            --set serve.max_context=4096 --batch $b --prompt 1024 --steps 16 \
            > "$OUT/bench_${m}_b$b.txt" 2>&1
        head -4 "$OUT/bench_${m}_b$b.txt" | tail -3
    done ;;
esac
case " $* " in *" graphs "*)
    stamp "bench with serve.cuda_graphs = 1"
    for b in 1 16; do
        timeout 80 build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.cuda_graphs=1 --batch $b --prompt 1024 \
            --steps 16 > "$OUT/bench_graphs_b$b.txt" 2>&1
        head -4 "$OUT/bench_graphs_b$b.txt" | tail -3
    done ;;
esac
case " $* " in *" ncu "*) # where the attention time goes, bf16 against the fp8 pool
    for kv in bf16 fp8; do
        stamp "bench_decode 26B-A4B 16 rows and 31B 1 row (its prefill breakdown), kv.local=$kv"
        for mb in gemma4-26b-a4b:16 gemma4-31b:1; do
            m=${mb%:*} b=${mb#*:}
            timeout 80 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set kv.local=$kv --batch $b --prompt 1024 \
                --steps 16 > "$OUT/bench_${m}_b${b}_$kv.txt" 2>&1
            head -4 "$OUT/bench_${m}_b${b}_$kv.txt" | tail -3; grep -i "attention" "$OUT/bench_${m}_b${b}_$kv.txt"
        done
    done
    for kv in bf16 fp8; do
        stamp "ncu: the attention kernels of one 16-row decode step (26B-A4B), kv.local=$kv"
        timeout 200 ncu --clock-control none --profile-from-start off \
            --kernel-name "${NCU_KERNELS:-regex:attn|moe_(up|down)}" \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section WarpStateStats --section MemoryWorkloadAnalysis --print-summary per-kernel \
            build/tests/bench_decode -c conf/gemma4-26b-a4b.ini --set model.weights=dummy \
            --set serve.max_context=4096 --set serve.cuda_graphs=0 --set kv.local=$kv \
            --batch 16 --prompt 1024 --steps 2 > "$OUT/ncu_$kv.txt" 2>&1
        echo "ncu rc $?"; grep -E "(attn|moe)_[a-z_]+kernel|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Memory Throughput" \
            "$OUT/ncu_$kv.txt" | head -80 | cut -c1-200
    done ;;
esac
case " $* " in *" pools "*) # the decode benchmark's cases under both local pools
    for kv in bf16 fp8; do
        stamp "bench_decode, kv.local=$kv"
        for mb in ${BENCH_CASES:-gemma4-26b-a4b:16 gemma4-31b:16 gemma4-31b:1}; do
            m=${mb%:*} b=${mb#*:}
            timeout 80 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
                --set serve.max_context=4096 --set kv.local=$kv --batch $b --prompt 1024 \
                --steps 16 > "$OUT/bench_${m}_b${b}_$kv.txt" 2>&1
            head -4 "$OUT/bench_${m}_b${b}_$kv.txt" | tail -3
            grep -i -E "attention|experts|prefill" "$OUT/bench_${m}_b${b}_$kv.txt" | head -6
        done
    done ;;
esac
case " $* " in *" racecheck-fixtures "*) # issue 6: racecheck over the tiny-fixture gate run, last
    # because it is the longest: every fixture and gate its own process, within what is left
    SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-$(($(left) - 15))} \
        bash tests/gpu/sanitize_fixtures.sh racecheck build/tests/test_fixtures "$OUT" ;;
esac
case " $* " in *" gemm "*)
    stamp "bench_gemm"
    timeout 150 build/tests/bench_gemm > "$OUT/bench_gemm.txt" 2>&1; cat "$OUT/bench_gemm.txt" ;;
esac
case " $* " in *" fp8 "*)
    stamp "fp8 local pool on the GPU, tiny fixtures (readings under the fp8 rules)"
    timeout 120 build/tests/test_fixtures tests/fixtures gpu-fp8 > "$OUT/gpu-fp8.log" 2> /dev/null
    cut -c1-260 "$OUT/gpu-fp8.log" ;;
esac
case " $* " in *" sanitize "*)
    stamp "memcheck tiny fixtures"
    timeout 200 compute-sanitizer --tool memcheck build/tests/test_fixtures tests/fixtures gpu \
        > "$OUT/memcheck.log" 2>&1
    echo "rc $?"; grep -E "ERROR SUMMARY|^FAIL" "$OUT/memcheck.log" | head -5
    stamp "racecheck tiny-moe"
    timeout 200 compute-sanitizer --tool racecheck build/tests/test_fixtures tests/fixtures gpu \
        tiny-moe > "$OUT/racecheck.log" 2>&1
    echo "rc $?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|^FAIL" "$OUT/racecheck.log" | head -5 ;;
esac
case " $* " in *" ab "*)
    stamp "serving A/B: kv.local bf16 vs fp8 (release/bench.py), $(left) s left"
    models=${AB_MODELS:-gemma4-26b-a4b gemma4-31b}
    share=$(echo $models | wc -w) # each model gets its share of what is left
    for m in $models; do
        t=$(( $(left) > 60 ? $(left) / share : 30 ))
        timeout "$t" python3 release/bench.py -c conf/$m.ini --max-seconds $((t - 15)) \
            --a-label bf16 --a-set kv.local=bf16 --b-label fp8 --b-set kv.local=fp8 \
            --rounds "${AB_ROUNDS:-3}" --out "$OUT/ab" --logs "$OUT/ab-logs" 2> "$OUT/ab_$m.stderr" |
            tail -12
        grep -h "ready in" "$OUT"/ab-logs/*.log 2>/dev/null | head -2 | cut -c1-200
        share=$((share - 1))
    done ;;
esac
case " $* " in *" nogeometry "*) ;; *)
    stamp "geometry ($(left) s left)"
    G4_FIXTURE_GATES="${GEOMETRY_GATES:-}" timeout "$(left)" ./build.sh gpu-test geometry \
        > "$OUT/geometry.log" 2>&1
    grep -E "^(FAIL|SKIP)|gpu:" "$OUT/geometry.log" | cut -c1-300 | head -20; tail -1 "$OUT/geometry.log"
    { tail -n 5 build/geometry.*.log; tail -20 build/tests/test_fixtures.stderr; } > "$OUT/geometry.stderr" 2>&1
    grep "^test_fixtures: +" build/tests/test_fixtures.stderr | grep -v skipping | tail -12 ;;
esac
pack_logs
