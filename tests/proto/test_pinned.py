#!/usr/bin/env python3
"""tests/proto/test_pinned.py - the pinned-composition gate (docs/gates.md): a fixed prompt
set, piped in at once at a fixed batch size and prefill chunk so prefill and decode rows share
steps, must answer with the same bytes, less each done line's `timing`, as the recording
committed under tests/pinned/ for that backend (cpu: the CPU reference in ./build.sh
test; gpu: the bf16 GPU build, recorded on an H200 until the forty-second session and on an
H100 since, whose SM count and kernels are the H200's, so the same bytes). A recording changes
only in a commit that says why.

  test_pinned.py --backend cpu|gpu              compare with the recording
  test_pinned.py --backend gpu --record DIR     write DIR/<backend>-tiny-moe.jsonl, then run
                                                again and compare (replays agree with themselves)
  PINNED_SET="key=value ..."                    extra overrides for speed-only switches (e.g.
                                                serve.fuse_projections=1): the bytes must not move

Answers are compared per request id (each request's lines in order): which step a line comes
from may change with arrival timing, its bytes may not (batch invariance). Prints PASS/FAIL
lines (tests/harness.h's format); exits 1 on any FAIL."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "pinned")
TIMING = re.compile(r',"timing":\{[^{}]*\}')

# Greedy and seeded-sampled rows, logprobs, a chat prompt and token prompts that cross the
# fixture's window (8) several times; max_batch 4 below keeps 4 rows waiting. Temperatures are
# well above 1: the random-weight fixture's distributions are so peaked that at 0.8 every
# sampled token was the argmax, and the recording would not show the sampler's stream.
REQUESTS = [
    {"id": "greedy-text", "prompt": "the river and the mountain", "max_tokens": 24},
    {"id": "greedy-tokens", "tokens": [2] + [400 + 13 * k for k in range(37)], "max_tokens": 20,
     "ignore_eos": True},
    {"id": "sampled", "prompt": "write a small model", "max_tokens": 24, "temperature": 3.0,
     "top_p": 0.9, "seed": 7, "ignore_eos": True},
    {"id": "top-k", "prompt": "north south", "max_tokens": 16, "temperature": 5.0, "top_k": 20,
     "seed": 123456789, "ignore_eos": True},
    {"id": "min-p", "tokens": [2, 500, 501, 502], "max_tokens": 16, "temperature": 4.0,
     "min_p": 0.05, "seed": 3, "ignore_eos": True},
    {"id": "logprobs", "prompt": "time city year", "max_tokens": 12, "logprobs": 5,
     "ignore_eos": True},
    {"id": "chat", "messages": [{"role": "system", "content": "answer briefly"},
                                {"role": "user", "content": "what is a window?"}],
     "max_tokens": 20, "ignore_eos": True},
    {"id": "no-stream", "tokens": [2] + [900 + 7 * k for k in range(21)], "max_tokens": 18,
     "stream": False, "ignore_eos": True},
]


def run_once(backend):
    """All requests in one write; returns {id: [line, ...]} with timing removed, and the exit
    code."""
    binary = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"), "g4pipe")
    # the recordings are of tiny-moe (random weights): the demo's own model may change
    p = subprocess.run([binary, "-c", os.path.join(ROOT, "conf", "demo.ini"),
                        "--set", "model.path=" + os.path.join(ROOT, "tests", "fixtures", "tiny-moe"),
                        "--set", f"debug.backend={backend}", "--set", "serve.max_batch=4",
                        "--set", "serve.prefill_chunk=16", "--set", "kv.local=bf16"]
                       + [a for kv in os.environ.get("PINNED_SET", "").split() for a in ("--set", kv)],
                       input="".join(json.dumps(r) + "\n" for r in REQUESTS),
                       capture_output=True, text=True, timeout=240)
    answers = {}
    for line in p.stdout.splitlines():
        rid = json.loads(line).get("id")
        answers.setdefault(str(rid), []).append(TIMING.sub("", line))
    return answers, p.returncode


def as_text(answers):
    return "".join(line + "\n" for r in REQUESTS for line in answers.get(r["id"], []))


def main():
    ap = argparse.ArgumentParser(description="the pinned-composition gate")
    ap.add_argument("--backend", choices=["cpu", "gpu"], required=True)
    ap.add_argument("--record", metavar="DIR", help="write the recording into DIR first")
    a = ap.parse_args()
    gate = ("gpu:" if a.backend == "gpu" else "") + "pinned_composition"
    if os.environ.get("PINNED_SET"):
        gate += "[" + os.environ["PINNED_SET"] + "]"
    name = f"{a.backend}-tiny-moe.jsonl"
    if a.record:
        answers, rc = run_once(a.backend)
        done = sum(1 for r in REQUESTS if any('"event":"done"' in x for x in answers.get(r["id"], [])))
        if rc != 0 or done != len(REQUESTS):
            print(f"FAIL {gate}: recording run: exit {rc}, {done} of {len(REQUESTS)} done lines")
            return 1
        os.makedirs(a.record, exist_ok=True)
        with open(os.path.join(a.record, name), "w") as f:
            f.write(as_text(answers))
        path = os.path.join(a.record, name)
    else:
        path = os.path.join(GOLDEN, name)
    if not os.path.exists(path):
        print(f"FAIL {gate}: no recording {os.path.relpath(path, ROOT)} (make it with --record "
              f"on the {a.backend} backend and commit it)")
        return 1
    with open(path) as f:
        want = f.read()
    answers, rc = run_once(a.backend)
    got = as_text(answers)
    if rc == 0 and got == want:
        print(f"PASS {gate}: {len(REQUESTS)} requests at max_batch 4, prefill chunk 16: "
              f"{len(got)} bytes less timing equal to {os.path.relpath(path, ROOT)}")
        return 0
    wl, gl = want.splitlines(), got.splitlines()
    first = next((i for i in range(min(len(wl), len(gl))) if wl[i] != gl[i]), min(len(wl), len(gl)))
    print(f"FAIL {gate}: exit {rc}; answers differ from {os.path.relpath(path, ROOT)} at line "
          f"{first + 1}: got {gl[first][:160] if first < len(gl) else 'EOF'!r}, want "
          f"{wl[first][:160] if first < len(wl) else 'EOF'!r}")
    return 1


def give_up(signum, frame):
    print("FAIL pinned_composition: no answer within 600 s (a stalled server?)", flush=True)
    os._exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(600)
    sys.exit(main())
