#!/usr/bin/env bash
# tests/gpu/box_verify.sh - one device call after the attention grid fix: build, the attention
# and argmax op gates, the mixed batch of prompts across 2,048 keys (dummy weights, finite
# check on), then the full step for FULL_MODELS. Logs under $OUT.
set -u
OUT=${OUT:-/tmp/g4pipe-out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
stamp build; ./build.sh tests > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -1 "$OUT/build.log"
stamp "op gates"; timeout 120 ./build.sh gpu-test test_attn test_sample > "$OUT/opgates.log" 2>&1
grep -E "^FAIL|32-split" "$OUT/opgates.log" | cut -c1-200 | head -8; tail -1 "$OUT/opgates.log"
stamp "mixed, dummy weights"
python3 - > /tmp/mixed.jsonl <<'PY'
import json, random
rng = random.Random(5)
for n in (1, 1023, 1024, 1025, 1300, 1700, 2047, 2048, 2049, 3000):
    print(json.dumps(dict(id=f"p{n}", tokens=[2] + [rng.randrange(364, 262144) for _ in range(n - 1)],
                          temperature=0, ignore_eos=True, logprobs=1, max_tokens=3)))
PY
timeout 100 build/g4pipe -c conf/gemma4-26b-a4b.ini --set model.weights=dummy --set serve.max_context=8192 \
    --set debug.check_finite=1 < /tmp/mixed.jsonl > "$OUT/mixed.jsonl" 2> "$OUT/mixed.stderr"
echo "rc $?: $(grep -c '"event":"done"' "$OUT/mixed.jsonl") done, $(grep -c '"event":"error"' "$OUT/mixed.jsonl") errors"
grep -E "check_finite|failed" "$OUT/mixed.stderr" | head -2 | cut -c1-250
for m in ${FULL_MODELS:-26b-a4b}; do
    stamp "full $m"
    FULL_MODELS=$m timeout ${FULL_TIMEOUT:-420} ./build.sh gpu-test full > "$OUT/full-$m.log" 2>&1
    echo "rc $?"; grep -E "^(FAIL|SKIP)|^INFO|passed" "$OUT/full-$m.log" | cut -c1-260
    grep "full_step make" build/full/make-$m.log | tail -1
done
stamp done
cp build/full/table.jsonl "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C build full 2>/dev/null; true
