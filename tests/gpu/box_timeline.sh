#!/usr/bin/env bash
# tests/gpu/box_timeline.sh - one device call: where a decode step's time goes, per op and per
# kernel (issue 21's first deliverable), and a before/after of it. bench_decode's per-step
# breakdown (CUDA events after every named step, 16 timed steps around it) for TIMELINE_CASES,
# then ncu over the one profiled step of NCU_CASES with only a kernel's duration and its DRAM
# bytes (one replay pass each, no clock control), as CSV and as tests/gpu/timeline_table.py's
# table. Logs under $OUT, packed into one archive.
# Usage: tests/gpu/box_timeline.sh [prev] [gates]
#   prev:  the same bench cases for the tree in .prev/src.tgz (git archive of the baseline),
#          built beside this one, the two trees' steps alternating case by case on one card
#   gates: ./build.sh gpu-test $TIMELINE_GATES after the build, before any timing
#   BENCH_VARIANTS="label:key=value ...": extra bench runs of each tree with one override each
#   NCU_SET=key=value: the ncu runs with that override (a variant's kernels, not the default's)
#   NCU_TREE=.prev/src: profile the baseline tree instead
set -u
DEADLINE=${DEADLINE:-560}
. tests/gpu/box_common.sh
trees=.
case " $* " in *" prev "*)
    mkdir -p .prev/src && tar xzf .prev/src.tgz -C .prev/src && cp -r .deps .prev/src/
    trees=". .prev/src" ;;
esac
tag_of() { [ "$1" = . ] && echo now || echo prev; }
stamp "build: $trees (at once)"
for tr in $trees; do
    (cd "$tr" && ./build.sh tests > "$OUT/build_$(tag_of "$tr").log" 2>&1; echo "build $(tag_of "$tr") rc $?") &
done
wait
for tr in $trees; do tail -1 "$OUT/build_$(tag_of "$tr").log"; done
case " $* " in *" gates "*)
    stamp "gates: ${TIMELINE_GATES:-test_ops test_moe engine_vs_hf pinned_composition}"
    timeout "${GATES_TIMEOUT:-240}" ./build.sh gpu-test \
        ${TIMELINE_GATES:-test_ops test_moe engine_vs_hf pinned_composition} > "$OUT/gpu-test.log" 2>&1
    grep -E "^(FAIL|SKIP)" "$OUT/gpu-test.log" | cut -c1-300 | head -30; tail -1 "$OUT/gpu-test.log" ;;
esac
bench() { # tree tag case [set]
    local m=${3%:*} b=${3#*:} extra=()
    [ -n "${4:-}" ] && extra=(--set "$4")
    (cd "$1" && timeout 90 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
        --set serve.max_context=4096 "${extra[@]}" --batch "$b" --prompt 1024 --steps 16) \
        > "$OUT/bench_${2}_${m}_b$b.txt" 2>&1
    echo "$2 $m b$b: $(sed -n 2p "$OUT/bench_${2}_${m}_b$b.txt" | cut -c1-90)"
}
stamp bench
for mb in ${TIMELINE_CASES:-gemma4-26b-a4b:1 gemma4-26b-a4b:16 gemma4-31b:1}; do
    for tr in $trees; do bench "$tr" "$(tag_of "$tr")" "$mb"; done
    for v in ${BENCH_VARIANTS:-}; do
        for tr in $trees; do bench "$tr" "$(tag_of "$tr")-${v%%:*}" "$mb" "${v#*:}"; done
    done
done
for mb in ${NCU_CASES:-gemma4-26b-a4b:1 gemma4-26b-a4b:16}; do
    [ "$(left)" -lt 100 ] && { stamp "no time left for ncu $mb"; continue; }
    m=${mb%:*} b=${mb#*:} ncu_set=()
    [ -n "${NCU_SET:-}" ] && ncu_set=(--set "$NCU_SET")
    stamp "ncu $m batch $b (one step, ungraphed) ${NCU_SET:-}"
    (cd "${NCU_TREE:-.}" && timeout $(($(left) - 40)) ncu --clock-control none --profile-from-start off \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
        --csv --print-units base build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
        --set serve.max_context=4096 --set serve.cuda_graphs=0 "${ncu_set[@]}" --batch "$b" --prompt 1024 \
        --steps 2) > "$OUT/ncu_${m}_b$b.csv" 2> "$OUT/ncu_${m}_b$b.err"
    echo "ncu rc $?"
    python3 tests/gpu/timeline_table.py "$OUT/ncu_${m}_b$b.csv" > "$OUT/timeline_${m}_b$b.md" 2>&1
    head -32 "$OUT/timeline_${m}_b$b.md"
done
pack_logs
