#!/usr/bin/env python3
"""tests/proto/test_batching.py - continuous batching through the protocol, as a piping user
sees it (issue 6's serving behaviour, on whichever backend the build has; the CPU reference in
CI): 16 requests piped in at once all decode in one step (a stats line sent mid-run shows 16
running and a 16-row step), a 17th request arriving mid-run joins the running batch (the next
stats line shows 17 and 17), every request ends with its full answer, and the late request's
tokens equal those of the same request run alone. Prints PASS/FAIL lines (tests/harness.h's
format); exits 1 on any FAIL. G4_CONF (default conf/demo.ini) and G4_SET ("key=value ...")
choose another model, e.g. the 26B-A4B with dummy weights on the GPU box
(tests/gpu/box_quick.sh demo); the stats lines go to stderr."""
import json
import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = 0
MAX_TOKENS = 40


def check(gate, ok, msg):
    global failures
    print(f"{'PASS' if ok else 'FAIL'} {gate}: {msg}", flush=True)
    failures += not ok


class G4:
    def __init__(self, extra):
        binary = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"), "g4pipe")
        conf = os.environ.get("G4_CONF", os.path.join(ROOT, "conf", "demo.ini"))
        for kv in os.environ.get("G4_SET", "").split():
            extra = extra + ["--set", kv]
        self.p = subprocess.Popen([binary, "-c", conf, "--set", "serve.max_batch=20"] + extra,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.tokens, self.done = {}, {}

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def read_until(self, pred):
        """Reads events until pred(event) holds; returns that event (None at EOF)."""
        for line in self.p.stdout:
            ev = json.loads(line)
            if ev.get("event") == "token":
                self.tokens.setdefault(ev["id"], []).append(ev["token"])
            elif ev.get("event") == "done":
                self.done[ev["id"]] = ev
            if pred(ev):
                return ev
        return None

    def close(self):
        self.p.stdin.close()
        rest = self.read_until(lambda ev: False)
        return self.p.wait(timeout=120) if rest is None else -1


def request(i):
    return {"id": f"r{i}", "tokens": [2] + [500 + 37 * i + k for k in range(7)],
            "max_tokens": MAX_TOKENS, "ignore_eos": True}


def main():
    g = G4([])
    for i in range(16):
        g.send(request(i))
    # every request has two tokens: the step that made the last second token, and any after
    # it, held the 16 decode rows alone (a first token can come from a step with prefill rows)
    g.read_until(lambda ev: len(g.tokens) == 16 and min(len(t) for t in g.tokens.values()) >= 2)
    g.send({"cmd": "stats"})
    s16 = g.read_until(lambda ev: ev.get("event") == "stats") or {}
    g.send(request(16))  # arrives while the 16 are decoding
    g.read_until(lambda ev: len(g.tokens.get("r16", [])) >= 2)
    g.send({"cmd": "stats"})
    s17 = g.read_until(lambda ev: ev.get("event") == "stats") or {}
    rc = g.close()
    print(f"stats with 16 running: {json.dumps(s16)}\nstats after the 17th: {json.dumps(s17)}",
          file=sys.stderr)
    check("serve_batches_16", s16.get("running") == 16 and s16.get("last_step_rows") == 16,
          f"mid-run stats: running {s16.get('running')}, last step {s16.get('last_step_rows')} "
          f"rows (want 16 and 16)")
    check("serve_late_request_joins", s17.get("running") == 17 and s17.get("last_step_rows") == 17,
          f"after a 17th request arrived mid-run: running {s17.get('running')}, last step "
          f"{s17.get('last_step_rows')} rows (want 17 and 17)")
    complete = all(len(g.tokens.get(f"r{i}", [])) == MAX_TOKENS and f"r{i}" in g.done
                   for i in range(17))
    check("serve_batch_complete", rc == 0 and complete,
          f"17 requests: {sum(len(t) for t in g.tokens.values())} token lines, "
          f"{len(g.done)} done lines, exit {rc}")
    alone = G4([])
    alone.send(request(16))
    alone.read_until(lambda ev: ev.get("event") == "done")
    alone.close()
    same = alone.tokens.get("r16") == g.tokens.get("r16")
    check("serve_late_request_invariant", same,
          f"the request that joined mid-run answered {'the same' if same else 'DIFFERENT'} "
          f"{len(g.tokens.get('r16', []))} tokens as when run alone")


def give_up(signum, frame):
    print("FAIL serve_batching: no answer within 300 s (a stalled server?)", flush=True)
    os._exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(300)  # a stalled server must fail the test, not hang the suite
    main()
    sys.exit(1 if failures else 0)
