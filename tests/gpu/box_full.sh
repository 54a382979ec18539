#!/usr/bin/env bash
# tests/gpu/box_full.sh - one device call: build, the full step for FULL_MODELS (default
# 26b-a4b), then the op and tiny-fixture gates named in GATES (default a short set), each
# bounded. Logs under $OUT (tarred), the gate lines and the table on stdout.
set -u
OUT=${OUT:-/tmp/g4pipe-out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
df -h / /dev/shm | tail -2; free -g | head -2
stamp build; ./build.sh tests > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -1 "$OUT/build.log"
for m in ${FULL_MODELS:-26b-a4b}; do
    stamp "full $m"
    FULL_MODELS=$m timeout ${FULL_TIMEOUT:-420} ./build.sh gpu-test full > "$OUT/full-$m.log" 2>&1
    echo "rc $?"; grep -E "^(FAIL|SKIP)|^INFO|passed" "$OUT/full-$m.log" | cut -c1-300
    grep -c "^PASS" "$OUT/full-$m.log"
    grep "full_step make" build/full/make-$m.log | tail -3
done
if [ -n "${GATES-test_gemm_lt test_sample}" ]; then
    stamp "gates: ${GATES-test_gemm_lt test_sample}"
    timeout ${GATES_TIMEOUT:-200} ./build.sh gpu-test ${GATES-test_gemm_lt test_sample} > "$OUT/gates.log" 2>&1
    grep -E "^(FAIL|SKIP)" "$OUT/gates.log" | cut -c1-300; tail -1 "$OUT/gates.log"
fi
stamp done
cp build/full/table.jsonl "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C build full tests/*.stderr 2>/dev/null; true
