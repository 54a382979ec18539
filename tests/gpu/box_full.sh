#!/usr/bin/env bash
# tests/gpu/box_full.sh - one device call: build, the full step for FULL_MODELS (default
# 26b-a4b) and a FULL_DIAG check run, then the op and tiny-fixture gates named in GATES (default a short set), each
# bounded. PINNED_RECORD=1 first writes a new GPU pinned recording under $OUT/pinned. Logs under $OUT (tarred), the gate lines and the table on stdout.
set -u
OUT=${OUT:-/tmp/g4pipe-out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
df -h / /dev/shm | tail -2; free -g | head -2
if [ "${SKIP_BUILD:-0}" != 1 ]; then  # SKIP_BUILD=1: a script before this one built the tree
    stamp build; ./build.sh tests > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -1 "$OUT/build.log"
fi
if [ "${PINNED_RECORD:-0}" = 1 ]; then  # a commit that moves GPU bits re-records, and says why
    stamp "pinned: record the GPU recording into \$OUT/pinned"
    BUILD_DIR=build timeout 120 python3 tests/proto/test_pinned.py --backend gpu --record "$OUT/pinned" \
        > "$OUT/pinned-record.log" 2>&1; echo "record rc $?"; tail -3 "$OUT/pinned-record.log" | cut -c1-300
    echo "against the committed recording (differs when the bits moved):"
    BUILD_DIR=build timeout 120 python3 tests/proto/test_pinned.py --backend gpu 2>&1 | tail -1 | cut -c1-400
fi
if [ -n "${GATES_FIRST:-}" ]; then  # short gates that must not wait on the full step's time
    stamp "gates first: $GATES_FIRST"
    timeout ${GATES_FIRST_TIMEOUT:-150} ./build.sh gpu-test $GATES_FIRST > "$OUT/gates-first.log" 2>&1
    grep -E "^(PASS|FAIL|SKIP|INFO)" "$OUT/gates-first.log" | cut -c1-300; tail -1 "$OUT/gates-first.log"
fi
for m in ${FULL_MODELS:-26b-a4b}; do
    stamp "full $m"
    FULL_MODELS=$m timeout ${FULL_TIMEOUT:-420} ./build.sh gpu-test full > "$OUT/full-$m.log" 2>&1
    echo "rc $?"; grep -E "^(FAIL|SKIP)|^INFO|passed" "$OUT/full-$m.log" | cut -c1-300
    grep -c "^PASS" "$OUT/full-$m.log"
    grep "full_step make" build/full/make-$m.log | tail -5
    if [ -n "${FULL_DIAG:-}" ]; then  # e.g. "--only 2047,2048 --set debug.gemm=plain --label /plain"
        stamp "diag $m: $FULL_DIAG"
        timeout ${DIAG_TIMEOUT:-150} python3 tests/full/full_step.py check --model $m \
            --dir "${FULL_DIR:-/dev/shm/g4full}/$m" --binary build/g4pipe --conf conf/gemma4-$m.ini \
            --pool bf16 $FULL_DIAG --log "$OUT/diag-$m.stderr" > "$OUT/diag-$m.log" 2>&1
        echo "rc $?"; grep -E "^(PASS|FAIL|INFO)" "$OUT/diag-$m.log" | cut -c1-300
    fi
done
if [ -n "${GATES-test_gemm_lt test_sample}" ]; then
    stamp "gates: ${GATES-test_gemm_lt test_sample}"
    timeout ${GATES_TIMEOUT:-200} ./build.sh gpu-test ${GATES-test_gemm_lt test_sample} > "$OUT/gates.log" 2>&1
    grep -E "^(FAIL|SKIP)" "$OUT/gates.log" | cut -c1-300; tail -1 "$OUT/gates.log"
fi
stamp done
cp build/full/table.jsonl "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C build full tests/*.stderr 2>/dev/null; true
