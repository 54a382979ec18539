#!/usr/bin/env bash
# tests/gpu/box_diag_rows.sh - one device call: is a prompt's answer the same whatever the
# step's row count (serve.prefill_chunk), and which op writes the mixed batch's NaN
# (debug.check_finite)? Dummy weights, no HF. Logs under $OUT.
set -u
OUT=${OUT:-/tmp/g4pipe-out}; mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
stamp build; ./build.sh > "$OUT/build.log" 2>&1; echo "build rc $?"; tail -1 "$OUT/build.log"
python3 - <<'PY'
import json, random
rng = random.Random(5)
c = {"temperature": 0, "ignore_eos": True, "logprobs": 3, "max_tokens": 3}
P = {n: [2] + [rng.randrange(364, 262144) for _ in range(n - 1)] for n in (1, 1023, 1024, 1025, 1300, 1700, 2047, 2048, 2049)}
for n, ids in P.items():
    open(f"/tmp/p{n}.jsonl", "w").write(json.dumps(dict(id=f"p{n}", tokens=ids, **c)) + "\n")
open("/tmp/mixed.jsonl", "w").write("".join(json.dumps(dict(id=f"p{n}", tokens=ids, **c)) + "\n" for n, ids in P.items()))
PY
summ() { python3 -c '
import sys, json
for l in sys.stdin:
    d = json.loads(l)
    if d.get("event") == "token" and d["index"] == 0:
        print("   ", d["id"], " ".join("%d:%.4f" % (t["id"], t["logprob"]) for t in d["logprobs"]["top"]))
    elif d.get("event") == "error": print("   ", d["id"], "ERROR", d["error"]["message"][:150])'; }
run() { local name=$1; shift
    timeout 100 build/g4pipe -c conf/gemma4-26b-a4b.ini --set model.weights=dummy --set serve.max_context=8192 "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.stderr"
    echo "-- $name rc $?"; summ < "$OUT/$name.jsonl"; grep -E "check_finite|step failed" "$OUT/$name.stderr" | head -3 | cut -c1-300; }
for n in 1025 1300 1700 2047; do
  for c in 2048 512; do run p${n}_c$c --set serve.prefill_chunk=$c < /tmp/p$n.jsonl; done
done
run p2047_plain_c2048 --set serve.prefill_chunk=2048 --set debug.gemm=plain < /tmp/p2047.jsonl
run p2047_plain_c512 --set serve.prefill_chunk=512 --set debug.gemm=plain < /tmp/p2047.jsonl
run mixed_c2048 --set serve.prefill_chunk=2048 < /tmp/mixed.jsonl
run mixed_check --set serve.prefill_chunk=2048 --set debug.check_finite=1 < /tmp/mixed.jsonl
run geo_p2047_c2048 --set model.name=geometry-26b-a4b --set serve.prefill_chunk=2048 < /tmp/p2047.jsonl
run geo_p2047_c512 --set model.name=geometry-26b-a4b --set serve.prefill_chunk=512 < /tmp/p2047.jsonl
stamp done
cd "$OUT" && tar czf logs.tgz *.jsonl *.stderr && rm -f *.jsonl *.stderr
