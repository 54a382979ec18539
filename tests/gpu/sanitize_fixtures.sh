#!/usr/bin/env bash
# tests/gpu/sanitize_fixtures.sh - compute-sanitizer (racecheck or memcheck) over the tiny-fixture
# gate run (issue 6's acceptance): every fixture and gate its own process, side by side (the
# sanitizer is CPU-bound, and racecheck of one fixture's batch_invariance gate alone outlasted
# every device call so far), each with its own log, so a slow one cannot hide the others' results.
# Usage: sanitize_fixtures.sh racecheck|memcheck TEST_FIXTURES_BINARY OUT_DIR
# GATES picks test_fixtures' gates (G4_FIXTURE_GATES), default vs_hf,batch_invariance,
# cuda_graphs: every kernel the engine launches, at several batch compositions and in graphs.
# SANITIZE_TIMEOUT bounds each process (seconds, default 170).
# SANITIZE_BI_MAX_LEN cuts the batch-invariance sequences (test_fixtures' G4_BI_MAX_LEN) for
# racecheck, under which the full 48 positions outlast a device call.
# SANITIZE_BI_COMPOSITIONS (e.g. "12 3") splits each batch-invariance / graphs process further:
# a process per group of the gate's three compositions (test_fixtures' G4_BI_COMPOSITIONS).
set -u
tool=$1 bin=$2 out=$3
gates=${GATES:-vs_hf,batch_invariance,cuda_graphs}
opts=""
help=$(compute-sanitizer --help 2>&1)
# cuBLASLt's nvjet kernels draw a racecheck report per launch (their shared-memory pipelines;
# NVIDIA's code, docs/testing.md). Leaving them out (--kernel-name-exclude kns=nvjet) made
# racecheck fail at the first forward pass on the H200 ("The Sanitizer failed to handle a
# hardware exception", then every CUDA call failed; memcheck ran the same gates clean beside
# it), so they stay in, and every report is printed: ours are told apart by their source lines.
case "$help" in *print-limit*) opts="$opts --print-limit 0" ;; esac
echo "$tool test_fixtures gpu, gates $gates, each fixture and gate within ${SANITIZE_TIMEOUT:-170} s;" \
    "options:${opts:- none}; batch-invariance positions ${SANITIZE_BI_MAX_LEN:-48}," \
    "compositions per process: ${SANITIZE_BI_COMPOSITIONS:-all}"
runs=""
for f in tiny-moe tiny-ple tiny-dense; do
    for g in ${gates//,/ }; do
        for c in ${SANITIZE_BI_COMPOSITIONS:-all}; do
            r="$f:$g:$c" log="$out/${tool}_fx_${f}_${g}_$c.log"
            runs="$runs $r"
            G4_FIXTURE_GATES="$g" G4_BI_MAX_LEN="${SANITIZE_BI_MAX_LEN:-}" \
                G4_BI_COMPOSITIONS="${c#all}" timeout "${SANITIZE_TIMEOUT:-170}" \
                compute-sanitizer --tool "$tool" $opts "$bin" tests/fixtures gpu $f > "$log" 2>&1 &
        done
    done
done
wait
for r in $runs; do
    IFS=: read -r f g c <<< "$r"
    log="$out/${tool}_fx_${f}_${g}_$c.log"
    echo "== $tool $f $g compositions $c"
    grep -E "^(PASS|FAIL)|(RACECHECK|ERROR|LEAK) SUMMARY|Internal Sanitizer Error" "$log" | cut -c1-160
    grep "composition" "$log" | tail -1
    # cuBLASLt's nvjet kernels are NVIDIA's (docs/testing.md); ours carry .cu:line (built with
    # -lineinfo) and must show none
    echo "reports: $(grep -c -E "Race reported|^========= (Invalid|Program hit|Uninitialized)" \
        "$log"); lines naming our sources:"
    grep -E "^=========.*kernels/[a-z_]+\.cu:[0-9]+" "$log" | sed -E 's/0x[0-9a-f]+//g' |
        sort | uniq -c | head -6 | cut -c1-200
done
