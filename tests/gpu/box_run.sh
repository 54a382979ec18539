#!/usr/bin/env bash
# tests/gpu/box_run.sh - one call on the GPU box: build, the GPU gates, and optional extras.
# Logs and artefacts go under $OUT (the device tool's folder that comes back).
# Usage: tests/gpu/box_run.sh [fixtures] [sanitize] [speed]
set -u
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
{ nvidia-smi; nvcc --version; python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'; } > "$OUT/env.log" 2>&1
echo "== build"; ./build.sh > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -2 "$OUT/build.log"
echo "== ldd"; ldd build/g4pipe | grep -v -E "vdso|ld-linux"
echo "== gpu-test"; ./build.sh gpu-test > "$OUT/gpu-test.log" 2>&1; grep -E "^(FAIL|SKIP)|gpu:" "$OUT/gpu-test.log" | cut -c1-240; tail -1 "$OUT/gpu-test.log"
case " $* " in *" sanitize "*)
    echo "== compute-sanitizer memcheck: one request through g4pipe on tiny-moe"
    echo '{"tokens":[2,700,800,900],"max_tokens":6}' | compute-sanitizer --tool memcheck \
        build/g4pipe --model tests/fixtures/tiny-moe 2>&1 | grep -E "ERROR SUMMARY"
    echo "== compute-sanitizer memcheck: the tiny-fixture gate run (up to 240 s)"
    timeout 240 compute-sanitizer --tool memcheck build/tests/test_fixtures tests/fixtures gpu > "$OUT/memcheck.log" 2>&1
    echo "rc $?"; grep -E "ERROR SUMMARY|^FAIL" "$OUT/memcheck.log" | head -5; grep -c "^PASS" "$OUT/memcheck.log" ;;
esac
case " $* " in *" bench "*)
    echo "== bench_decode, batch 1, 1024-token context"
    for m in gemma4-26b-a4b gemma4-31b; do
        timeout 150 build/tests/bench_decode -c conf/$m.ini --set model.weights=dummy \
            --set serve.max_context=4096 --batch 1 --prompt 1024 --steps 16 2>&1 | tee "$OUT/bench_$m.txt" | head -4
    done ;;
esac
case " $* " in *" speed "*)
    echo "== decode speed, dummy weights, one request"
    for m in gemma4-26b-a4b gemma4-31b; do
        python3 - "$m" > "$OUT/speed_$m.jsonl" <<'PY'
import json, random, sys
random.seed(1)
print(json.dumps({"id": "warm", "tokens": [2] + [random.randrange(1000, 200000) for _ in range(16)], "max_tokens": 4, "ignore_eos": True}))
print(json.dumps({"id": "c1", "tokens": [2] + [random.randrange(1000, 200000) for _ in range(1023)], "max_tokens": 64, "ignore_eos": True, "stream": False}))
PY
        build/g4pipe -c conf/$m.ini --set model.weights=dummy --set serve.max_context=4096 \
            < "$OUT/speed_$m.jsonl" 2> "$OUT/speed_$m.stderr" | grep '"c1"' | grep -o '"timing".*'
        grep -E "device|KV" "$OUT/speed_$m.stderr" | head -3
    done ;;
esac
true
