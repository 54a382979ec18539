#!/usr/bin/env bash
# tests/gpu/box_diag_chunks.sh - one device call: prompts past serve.prefill_chunk through the
# binary, alone and mixed with a decoding request, under debug.check_finite (issue 18's
# diagnosis). Logs under $OUT.
set -u
OUT=${OUT:-/tmp/g4pipe-out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
stamp build; ./build.sh > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -1 "$OUT/build.log"
python3 - > /tmp/req.jsonl <<'PY'
import json, random
random.seed(7)
def toks(n): return [2] + [random.randrange(1000, 4000) for _ in range(n - 1)]
common = {"temperature": 0, "ignore_eos": True, "logprobs": 2}
print(json.dumps(dict(id="short", tokens=toks(5), max_tokens=12, **common)))
print(json.dumps(dict(id="long", tokens=toks(1100), max_tokens=4, **common)))
PY
sed -n 2p /tmp/req.jsonl > /tmp/long.jsonl
sed -n 1p /tmp/req.jsonl > /tmp/short.jsonl
summ() { python3 -c '
import sys, json
out = {}
for l in sys.stdin:
    d = json.loads(l); i = d.get("id")
    if d.get("event") == "token": out.setdefault(i, []).append("%d:%.2f" % (d["token"], d["logprobs"]["chosen"]))
    elif d.get("event") == "error": out.setdefault(i, []).append("ERROR " + d["error"]["message"])
for k, v in out.items(): print("   ", k, " ".join(v))'; }
run() { # name conf sets... < input
    local name=$1 conf=$2; shift 2
    timeout 120 build/g4pipe -c "$conf" "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.stderr"
    echo "-- $name rc $?"; summ < "$OUT/$name.jsonl"
    grep -E "error|check_finite|failed" "$OUT/$name.stderr" | head -4 | cut -c1-400
}
D="--set model.weights=dummy --set serve.max_context=4096 --set serve.prefill_chunk=1024"
for m in gemma4-26b-a4b geometry-26b-a4b; do
  c=conf/gemma4-26b-a4b.ini
  stamp "$m"
  run ${m}_alone $c $D --set model.name=$m < /tmp/long.jsonl
  run ${m}_mixed $c $D --set model.name=$m < /tmp/req.jsonl
  run ${m}_mixed_check $c $D --set model.name=$m --set debug.check_finite=1 < /tmp/req.jsonl
  run ${m}_short $c $D --set model.name=$m < /tmp/short.jsonl
done
stamp "26b fp8 / no graphs"
run fp8_mixed_check conf/gemma4-26b-a4b.ini $D --set kv.local=fp8 --set debug.check_finite=1 < /tmp/req.jsonl
run nograph_mixed conf/gemma4-26b-a4b.ini $D --set serve.cuda_graphs=0 < /tmp/req.jsonl
stamp "tiny-moe GPU vs CPU, chunk 16"
python3 - > /tmp/tiny.jsonl <<'PY'
import json
c = {"temperature": 0, "ignore_eos": True, "logprobs": 2}
print(json.dumps(dict(id="a", tokens=[2, 3, 4], max_tokens=12, **c)))
print(json.dumps(dict(id="b", tokens=[2] + list(range(5, 45)), max_tokens=4, **c)))
PY
run tiny_gpu conf/demo.ini --set serve.prefill_chunk=16 < /tmp/tiny.jsonl
run tiny_cpu conf/demo.ini --set serve.prefill_chunk=16 --set debug.backend=cpu < /tmp/tiny.jsonl
stamp "e2b dummy mixed check"
run e2b_mixed_check conf/gemma4-e2b.ini --set model.weights=dummy --set serve.max_context=4096 --set debug.check_finite=1 < /tmp/req.jsonl
stamp done
cd "$OUT" && tar czf logs.tgz *.jsonl *.stderr && rm -f *.jsonl *.stderr
