"""release/load.py - the load benchmark of release/bench.py (--load): requests arrive at a given
rate, as a Poisson process seeded by --seed, with prompt and output lengths drawn from fixed
distributions, the way vLLM's serving benchmark drives a server. Per rate and configuration it
reports the first-token time (TTFT), the time per output token (TPOT: a request's decode time
over its tokens after the first), the gaps between consecutive streamed tokens (ITL), the
end-to-end latency, each as p50 and p99, and the output-token and request throughput over the
run. Every configuration gets the same schedule (arrival times, lengths, token ids), so the A/B
is paired; each rate starts from an idle server and drains before the next.

Times are the client's, taken when a line is read from g4pipe's stdout (a reader thread
timestamps every line), so they include the pipe; the server's own ttft_ms is kept beside them.
A request that g4pipe refuses (an error event: a full queue, a prompt that could never fit) is
counted, not fatal: under overload refusals are part of the answer. Standard library only."""
import json
import math
import queue
import random
import statistics
import subprocess
import threading
import time


def parse_dist(text, what):
    """'lo:hi' -> (lo, hi), integers, 1 <= lo <= hi."""
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"{what} takes lo:hi (two integers), not {text!r}") from None
    if lo < 1 or hi < lo:
        raise ValueError(f"{what} needs 1 <= lo <= hi, not {text!r}")
    return lo, hi


def schedule(seed, rate, n, prompt_dist, output_dist, vocab):
    """n requests for one rate: arrival offsets (s) of a Poisson process of `rate` requests a
    second, prompt lengths log-uniform over prompt_dist (so short and long prompts both occur,
    as in chat traffic), output lengths uniform over output_dist, and the prompts' token ids.
    The same seed gives the same schedule on every run and for every configuration."""
    rng = random.Random(f"{seed}:{rate}:{n}:{prompt_dist}:{output_dist}")
    t, out = 0.0, []
    lo, hi = prompt_dist
    for i in range(n):
        t += rng.expovariate(rate)
        plen = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        plen = min(max(plen, lo), hi)
        olen = rng.randint(*output_dist)
        toks = [2] + [rng.randrange(min(1000, vocab // 2), vocab) for _ in range(plen - 1)]
        out.append({"at": t, "prompt": plen, "output": olen, "tokens": toks})
    return out


class LoadServer:
    """A g4pipe process whose stdout a reader thread timestamps line by line."""

    def __init__(self, binary, conf, sets, log_path):
        cmd = [binary, "-c", conf]
        for s in sets:
            cmd += ["--set", s]
        self.cmd = cmd
        self.errlog = open(log_path, "w")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.errlog, text=True, bufsize=1)
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put((time.monotonic(), line))
        self.lines.put((time.monotonic(), None))

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def close(self):
        try:
            self.send({"cmd": "shutdown"})
            self.p.stdin.close()
            self.p.wait(timeout=120)
        except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
            self.p.kill()
        self.errlog.close()


def run_rate(server, plan, tag, timeout_s):
    """Sends plan's requests at their arrival times while reading the answers; returns one
    record per request. Raises RuntimeError when g4pipe exits or the run passes timeout_s."""
    recs = {f"{tag}-{i}": {"prompt": r["prompt"], "output": r["output"], "sent": None,
                           "first": None, "last": None, "done": None, "tokens": 0, "gaps": [],
                           "error": None, "server_ttft_ms": None}
            for i, r in enumerate(plan)}
    ids = list(recs)
    open_ids, nxt = set(ids), 0
    t0 = time.monotonic()
    while open_ids:
        now = time.monotonic()
        if now - t0 > timeout_s:
            raise RuntimeError(f"the run passed {timeout_s:.0f} s with {len(open_ids)} requests open")
        while nxt < len(plan) and t0 + plan[nxt]["at"] <= now:
            r, rid = plan[nxt], ids[nxt]
            server.send({"id": rid, "tokens": r["tokens"], "max_tokens": r["output"],
                         "ignore_eos": True, "stream": True})
            recs[rid]["sent"] = time.monotonic()
            nxt += 1
        wait = (t0 + plan[nxt]["at"] - time.monotonic()) if nxt < len(plan) else 0.5
        try:
            t, line = server.lines.get(timeout=max(0.0005, min(wait, 0.5)))
        except queue.Empty:
            continue
        if line is None:
            raise RuntimeError(f"g4pipe exited ({' '.join(server.cmd)}); see {server.errlog.name}")
        ev = json.loads(line)
        rec = recs.get(ev.get("id"))
        if rec is None:
            continue
        kind = ev.get("event")
        if kind == "token":
            n = ev["index"] + 1 - rec["tokens"]  # a held-back multi-byte character: several
            if rec["first"] is None:
                rec["first"] = t
            elif n > 0:
                rec["gaps"].extend([(t - rec["last"]) * 1e3 / n] * n)
            rec["last"], rec["tokens"] = t, rec["tokens"] + max(n, 0)
        elif kind in ("done", "error"):
            rec["done"] = t
            if kind == "error":
                rec["error"] = ev.get("error", {}).get("code", "error")
            else:
                rec["tokens"] = ev["usage"]["completion_tokens"]
                rec["server_ttft_ms"] = ev["timing"]["ttft_ms"]
            open_ids.discard(ev["id"])
    return [recs[i] for i in ids], time.monotonic() - t0


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))] if v else None


def summarize_rate(rate, recs, wall_s):
    """The figures of one rate's runs for one configuration (times in ms); wall_s is the sum of
    those runs' wall times."""
    ok = [r for r in recs if r["error"] is None]
    ttft = [(r["first"] - r["sent"]) * 1e3 for r in ok if r["first"] is not None]
    tpot = [(r["last"] - r["first"]) * 1e3 / (r["tokens"] - 1) for r in ok
            if r["first"] is not None and r["tokens"] > 1]
    itl = [g for r in ok for g in r["gaps"]]
    e2e = [(r["done"] - r["sent"]) * 1e3 for r in ok]
    toks = sum(r["tokens"] for r in ok)
    # the runs' own wall time, summed: recs pool the rounds of one configuration and rate, and
    # between two rounds the other configuration ran, so first send to last answer over the
    # pool would count its time too (and halve every rate at two rounds); 0 only where no run
    # happened, and every rate below is then 0
    span = wall_s

    def both(v):
        return {"p50": pct(v, 0.5), "p99": pct(v, 0.99),
                "mean": statistics.fmean(v) if v else None}

    errors = {}
    for r in recs:
        if r["error"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    # requests in flight, averaged over the run (Little's law: the time all requests spent
    # open over the span): what "a rate that keeps ~16 requests running" is read from
    held = sum(r["done"] - r["sent"] for r in recs
               if r["done"] is not None and r["sent"] is not None)
    return {"rate": rate, "requests": len(recs), "completed": len(ok), "errors": errors,
            "duration_s": span, "in_flight_mean": held / span if span > 0 else 0.0,
            "request_throughput": len(ok) / span if span > 0 else 0.0,
            "output_tokens_per_s": toks / span if span > 0 else 0.0,
            "prompt_tokens": sum(r["prompt"] for r in recs), "output_tokens": toks,
            "ttft_ms": both(ttft), "tpot_ms": both(tpot), "itl_ms": both(itl),
            "e2e_ms": both(e2e),
            "server_ttft_ms_p50": pct([r["server_ttft_ms"] for r in ok
                                       if r["server_ttft_ms"] is not None], 0.5)}


def request_figures(r):
    """One request's record for the JSON: its lengths and times in ms from its send."""
    def ms(t):
        return None if t is None or r["sent"] is None else (t - r["sent"]) * 1e3
    tpot = ((r["last"] - r["first"]) * 1e3 / (r["tokens"] - 1)
            if r["first"] is not None and r["tokens"] > 1 else None)
    return {"prompt": r["prompt"], "output": r["output"], "tokens": r["tokens"],
            "error": r["error"], "ttft_ms": ms(r["first"]), "tpot_ms": tpot,
            "e2e_ms": ms(r["done"]), "server_ttft_ms": r["server_ttft_ms"]}


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


def markdown(result):
    lines = [f"# g4pipe load benchmark: {' vs '.join(c['label'] for c in result['configs'])}", "",
             f"{result['model']}, {result['card']}, commit {result['commit']}, "
             f"{result['requests']} requests a rate, Poisson arrivals (seed {result['seed']}), "
             f"prompts {result['prompt_dist'][0]}-{result['prompt_dist'][1]} tokens "
             f"(log-uniform), outputs {result['output_dist'][0]}-{result['output_dist'][1]} "
             f"(uniform), greedy, {result['weights']} weights", "",
             "| config | rate (req/s) | completed | errors | in flight (mean) | req/s | "
             "output tok/s | TTFT p50 (p99) | TPOT p50 (p99) | ITL p50 (p99) | E2E p50 (p99) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cfg in result["configs"]:
        for s in cfg["load"]:
            err = sum(s["errors"].values())
            lines.append(
                f"| {cfg['label']} | {s['rate']:g} | {s['completed']}/{s['requests']} | {err} | "
                f"{s['in_flight_mean']:.1f} | {s['request_throughput']:.2f} | "
                f"{s['output_tokens_per_s']:.1f} | "
                f"{fmt(s['ttft_ms']['p50'])} ms ({fmt(s['ttft_ms']['p99'])}) | "
                f"{fmt(s['tpot_ms']['p50'], 2)} ms ({fmt(s['tpot_ms']['p99'], 2)}) | "
                f"{fmt(s['itl_ms']['p50'], 2)} ms ({fmt(s['itl_ms']['p99'], 2)}) | "
                f"{fmt(s['e2e_ms']['p50'], 0)} ms ({fmt(s['e2e_ms']['p99'], 0)}) |")
    return "\n".join(lines) + "\n"
