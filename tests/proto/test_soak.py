#!/usr/bin/env python3
"""A soak: many requests with random valid and invalid parameters, prompt lengths and
cancellations through build/g4pipe's protocol (the bundled trained tiny MoE, conf/demo.ini,
CPU backend unless the build has a GPU), at serve.max_batch concurrency. Seeded, so a failure
repeats.

Gates:
  soak_every_id_once   every request line gets exactly one terminal line (done or error),
                       under its own id; every error has a code and a message; the process
                       exits 0 at the end of input (which also means the scheduler found every
                       KV page back: serve exits 1 when pages are still held after the last
                       request ended)
  soak_alone_equal     a sample of the valid requests (greedy and seeded sampling), run again
                       one at a time (serve.max_batch = 1), answer byte for byte as they did in
                       the crowd (timing removed)
  soak_memory_flat     the process's resident memory after the whole run is within 10% + 16 MB
                       of what it was after the first fifth (a leak of a few hundred bytes a
                       request would show)
  soak_stats           a stats line at the end reports nothing queued or running and every KV
                       page of both families free

SOAK_REQUESTS (default 10000) sets the size; the GPU box runs the same file against the
26B-A4B with dummy weights (SOAK_CONF, SOAK_SET).
"""
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

BUILD = os.environ.get("BUILD_DIR", "build")
BIN = os.path.join(BUILD, "g4pipe")
CONF = os.environ.get("SOAK_CONF", "conf/demo.ini")
SETS = [s for s in os.environ.get("SOAK_SET", "serve.max_batch=16").split() if s]
N = int(os.environ.get("SOAK_REQUESTS", "10000"))
SEED = 20261202
VOCAB = int(os.environ.get("SOAK_VOCAB", "4096"))
SAMPLE = 300
TIMING = re.compile(r',"timing":\{[^}]*\}')

WORDS = ("def return import class self value list dict print for while if else try except "
         "with open file path data result item key").split()


def make_lines(rng):
    """(lines, ids): the request and control lines, and the ids of request lines in order."""
    lines, ids, live = [], [], []
    i = 0
    while len(ids) < N:  # N request lines; the cancels come on top
        i += 1
        rid = f"s{i}"
        kind = rng.random()
        if kind < 0.06:  # invalid lines of several kinds, each with its own id
            bad = rng.choice([
                {"id": rid, "tokens": [2, 3], "max_tokens": -1},
                {"id": rid, "tokens": [2, VOCAB + 5]},
                {"id": rid, "prompt": "x", "temperature": "hot"},
                {"id": rid, "tokens": [2, 3], "nonsense": 1},
                {"id": rid, "tokens": [2], "top_p": 1.5},
                {"id": rid, "tokens": []},
            ])
            lines.append(json.dumps(bad))
            ids.append(rid)
            continue
        if kind < 0.08 and live:  # a cancel of a recent request (it may have ended already)
            lines.append(json.dumps({"cmd": "cancel", "id": rng.choice(live[-20:])}))
            continue
        # mostly short (the CPU reference costs ~2.4 ms a row), some past the window, a few
        # past serve.prefill_chunk (256 in conf/demo.ini: prefilled in two chunks)
        req = {"id": rid, "max_tokens": rng.randint(1, 4) if rng.random() < 0.9 else rng.randint(5, 12)}
        u = rng.random()
        n = rng.randint(0, 7) if u < 0.88 else rng.randint(8, 40) if u < 0.985 else rng.randint(240, 300)
        if rng.random() < 0.7:
            req["tokens"] = [2] + [rng.randrange(4, VOCAB) for _ in range(n)]
        else:
            req["prompt"] = " ".join(rng.choice(WORDS) for _ in range(max(1, n // 2)))
        r = rng.random()
        if r < 0.4:
            req["temperature"] = 0
        elif r < 0.8:
            req["temperature"] = round(rng.uniform(0.3, 1.2), 2)
            req["seed"] = rng.randrange(1 << 31)
            if rng.random() < 0.5:
                req["top_k"] = rng.randint(1, 50)
            if rng.random() < 0.5:
                req["top_p"] = round(rng.uniform(0.5, 1.0), 2)
        if rng.random() < 0.2:
            req["ignore_eos"] = True
        if rng.random() < 0.1:
            req["logprobs"] = rng.randint(1, 5)
        if rng.random() < 0.1:
            req["stop"] = [rng.choice(WORDS)]
        if rng.random() < 0.05:
            req["stream"] = False
        lines.append(json.dumps(req))
        ids.append(rid)
        live.append(rid)
    return lines, ids


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def serve(lines, sets, expect, watch=None):
    """Runs the binary on lines; once expect terminal lines have come, asks for a stats line
    and ends the input. Returns (exit status, answer lines, rss samples, stderr lines). watch
    holds the answer counts at which to sample the resident memory."""
    p = subprocess.Popen([BIN, "-c", CONF] + sum((["--set", s] for s in sets), []),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, bufsize=1)
    errs = []
    threading.Thread(target=lambda: errs.extend(p.stderr), daemon=True).start()

    lock = threading.Lock()

    def feed():
        for line in lines:
            with lock:
                p.stdin.write(line + "\n")
        with lock:
            p.stdin.flush()
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    out, rss, terminal = [], {}, 0
    for line in p.stdout:
        out.append(line.rstrip("\n"))
        if '"event":"done"' in line or ('"event":"error"' in line and
                                         "cancel: no request" not in line):
            terminal += 1
            if watch and terminal in watch:
                rss[terminal] = rss_kb(p.pid)
            if terminal == expect:  # everything answered: the stats line, then the end
                feeder.join()
                with lock:
                    p.stdin.write('{"cmd":"stats"}\n')
                    p.stdin.close()
    p.wait(timeout=60)
    return p.returncode, out, rss, errs


def report(ok, gate, msg):
    print(f"{'PASS' if ok else 'FAIL'} {gate}: {msg}", flush=True)
    return ok


def main():
    print("PLAN 4", flush=True)
    if not os.access(BIN, os.X_OK):
        for g in ("soak_every_id_once", "soak_alone_equal", "soak_memory_flat", "soak_stats"):
            report(False, g, f"no binary at {BIN}")
        return 1
    rng = random.Random(SEED)
    lines, ids = make_lines(rng)
    t0 = time.time()
    fifth = len(ids) // 5
    rc, out, rss, errs = serve(lines, SETS, len(ids), watch={fifth, len(ids)})
    secs = time.time() - t0
    per_id, cancel_errors, bad = {}, 0, []
    stats = None
    for line in out:
        ev = json.loads(line)
        if ev.get("event") == "stats":
            stats = ev
            continue
        rid = ev.get("id")
        if ev.get("event") == "error" and "cancel: no request" in ev["error"].get("message", ""):
            cancel_errors += 1
            continue
        per_id.setdefault(rid, []).append(ev)
        if ev.get("event") == "error" and not (ev["error"].get("code") and ev["error"].get("message")):
            bad.append(rid)
    counts = {rid: sum(e["event"] in ("done", "error") for e in per_id.get(rid, [])) for rid in ids}
    wrong = [rid for rid, c in counts.items() if c != 1]
    stray = [rid for rid in per_id if rid not in counts]
    dones = sum(1 for rid in ids if per_id.get(rid) and per_id[rid][-1]["event"] == "done")
    cancelled = sum(1 for rid in ids if per_id.get(rid) and
                    per_id[rid][-1].get("finish_reason") == "cancelled")
    fails = 0
    fails += not report(
        rc == 0 and not wrong and not stray and not bad,
        "soak_every_id_once",
        f"{len(ids)} requests in {secs:.0f} s: {dones} done ({cancelled} cancelled), "
        f"{len(ids) - dones} errors, {cancel_errors} cancels of ended requests; ids answered "
        f"other than once: {len(wrong)} {wrong[:3]}, stray ids {len(stray)}, errors without "
        f"code or message {len(bad)}; exit {rc}" + ("" if rc == 0 else f"; {errs[-2:]}"))

    # the sample, one at a time
    valid = [(rid, line) for rid, line in zip(ids, [l for l in lines if '"cmd"' not in l])
             if per_id.get(rid) and per_id[rid][-1]["event"] == "done" and
             per_id[rid][-1].get("finish_reason") != "cancelled"]
    sample = random.Random(SEED + 1).sample(valid, min(SAMPLE, len(valid)))
    rc2, out2, _, errs2 = serve([l for _, l in sample], [s for s in SETS if "max_batch" not in s] +
                                ["serve.max_batch=1"], len(sample))
    alone = {}
    for line in out2:
        ev = json.loads(line)
        if ev.get("event") != "stats":
            alone.setdefault(ev["id"], []).append(TIMING.sub("", line))
    crowd = {}
    for line in out:
        ev = json.loads(line)
        if ev.get("id") in alone and ev.get("event") != "stats":
            crowd.setdefault(ev["id"], []).append(TIMING.sub("", line))
    differ = [rid for rid, _ in sample if alone.get(rid) != crowd.get(rid)]
    sampled = sum(1 for _, l in sample if '"temperature": 0,' not in l and '"temperature"' in l)
    fails += not report(rc2 == 0 and not differ and sample,
                        "soak_alone_equal",
                        f"{len(sample)} answered requests ({sampled} sampled) run again one at a "
                        f"time: {len(differ)} differ {differ[:3]}; exit {rc2}")

    a, b = rss.get(fifth, -1), rss.get(len(ids), -1)
    fails += not report(a > 0 and b > 0 and b <= a * 1.10 + 16 * 1024,
                        "soak_memory_flat",
                        f"resident memory {a / 1024:.1f} MB after {fifth} answers, "
                        f"{b / 1024:.1f} MB after {len(ids)} (limit +10% + 16 MB)")

    kv = stats.get("kv_pages", {}) if stats else {}
    free = all(kv.get(f, {}).get("free") == kv.get(f, {}).get("total") for f in ("local", "global"))
    fails += not report(bool(stats) and stats.get("queued") == 0 and stats.get("running") == 0 and
                        free and len(kv) == 2,
                        "soak_stats",
                        f"the last stats line: {json.dumps(stats)[:240] if stats else 'none'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
