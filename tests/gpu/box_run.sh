#!/usr/bin/env bash
# tests/gpu/box_run.sh - one call on the GPU box: build, GPU gates, and (with "fixtures") the
# tiny fixtures made with HF on the GPU. Logs and artefacts go under $OUT (the device tool's
# folder that comes back). Usage: tests/gpu/box_run.sh [fixtures] [sanitize]
set -u
OUT=${OUT:-/tmp/g4pipe-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
{ nvidia-smi; nvcc --version; python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'; } > "$OUT/env.log" 2>&1
echo "== build"; ./build.sh > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -3 "$OUT/build.log"
echo "== ldd"; ldd build/g4pipe
echo "== gpu-test"; ./build.sh gpu-test 2>&1 | tail -20 | tee "$OUT/gpu-test.log"
case " $* " in *" sanitize "*)
    echo "== compute-sanitizer"; compute-sanitizer --tool memcheck build/tests/test_gemm_lt 2>&1 | tail -4 ;;
esac
case " $* " in *" fixtures "*)
    echo "== fixtures"
    rm -rf "$OUT/fx" && python3 tests/fixtures/make_fixtures.py tiny --out "$OUT/fx" > "$OUT/fixtures.log" 2>&1
    echo "make_fixtures rc $?"; tail -3 "$OUT/fixtures.log"
    (cd "$OUT/fx" && tar czf ../fixtures.tgz . ) && rm -rf "$OUT/fx.check" && mkdir -p "$OUT/fx.check" && tar xzf "$OUT/fixtures.tgz" -C "$OUT/fx.check"
    echo "== CPU engine vs these dumps"; build/tests/test_fixtures "$OUT/fx.check" 2>/dev/null
    rm -rf "$OUT/fx" "$OUT/fx.check"
    echo "== torch.topk ties on CUDA"
    python3 - <<'PY'
import torch
for n, k in ((16, 4), (128, 8)):
    bad = 0
    for t in range(200):
        x = torch.randn(64, n, device="cuda").mul(4).round().div(4).softmax(-1)
        v, i = torch.topk(x, k, dim=-1)
        for r in range(64):
            for a in range(k - 1):
                if v[r, a] == v[r, a + 1] and i[r, a] > i[r, a + 1]: bad += 1
            # the cut: a tie between the k-th kept and a dropped expert
            kth = v[r, k - 1]
            dropped = [j for j in range(n) if x[r, j] == kth and j not in i[r].tolist()]
            if dropped and min(dropped) < i[r, k - 1]: bad += 1
    print(f"n={n} k={k}: tie orders not lowest-id-first: {bad}")
PY
    ;;
esac
true
