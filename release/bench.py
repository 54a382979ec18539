#!/usr/bin/env python3
"""release/bench.py - the serving A/B of docs/benchmarks.md: two configurations of g4pipe (two
sets of --set overrides, or two binaries) alternate in paired rounds on the same card; at each
concurrency c, c requests of PROMPT random tokens and OUTPUT tokens (ignore_eos) go in at once,
greedy, or sampled at --temperature (with --top-k; 0: over the whole vocabulary, which the
host draws, runtime/sched/sched.c) with a seed per request.

Per configuration and concurrency it reports the decode step time (median and p90 of the
gaps between a request's consecutive token lines, streamed: the c rows share every step, so a
gap is one step; the median is a step of decode rows alone, which is what the floor of
docs/benchmarks.md counts, and the p90 shows the steps that also carried other requests' prefill
chunks), the time per output token (median of the requests' decode_ms_per_token, prefill
chunks included), output tokens/s, first-token time (p50, p99), the floor and the fraction of
it, and GPU memory in use. A
difference between A and B smaller than the spread of either configuration's per-round medians
is reported as flat. Results: JSON, a markdown table and a PNG plot under --out, named by git
commit, card and time; one progress line per measurement on stderr.

With --load RATES it is the load benchmark instead (release/load.py): requests arriving as a
seeded Poisson process at each rate, prompt and output lengths drawn from --prompt-dist and
--output-dist, reporting TTFT, time per output token, inter-token gaps and end-to-end latency
(p50, p99) and throughput per rate and configuration, as vLLM's serving benchmark does.

Only the standard library: the GPU box cannot install packages. Timing is reported, never
asserted (docs/benchmarks.md).

  release/bench.py -c conf/gemma4-26b-a4b.ini --a-label bf16 --a-set kv.local=bf16 \\
      --b-label fp8 --b-set kv.local=fp8                     # dummy weights at c = 1, 4, 16
  release/bench.py -c conf/gemma4-31b.ini --b-bin ../prev/build/g4pipe --b-label prev
  release/bench.py -c conf/gemma4-26b-a4b.ini --load 0.5,1,2,4 --requests 64 \\
      --a-label chunk2048 --b-label budget256 --b-set serve.step_tokens=256
"""
import argparse
import configparser
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load  # noqa: E402  (release/load.py)
import plot_png  # noqa: E402  (release/plot_png.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"bench: error: {msg}", file=sys.stderr)
    sys.exit(2)


# ---- the model and its floor --------------------------------------------------------------

def read_ini(path):
    p = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    if not p.read(path):
        fail(f"cannot read {path}")
    return p


def model_desc(conf_path, sets, override):
    """The compiled-in model description (graph/models/NAME.ini) the run serves: --model-desc,
    else model.name of the configuration (after --set), else the folder name of model.path."""
    if override:
        path = override
    else:
        c = read_ini(conf_path)
        name = c.get("model", "name", fallback="")
        mpath = c.get("model", "path", fallback="")
        for s in sets:
            k, _, v = s.partition("=")
            if k == "model.name":
                name = v
            if k == "model.path":
                mpath = v
        name = name or os.path.basename(os.path.normpath(mpath))
        path = os.path.join(ROOT, "graph", "models", f"{name}.ini")
    m = read_ini(path)["model"]
    ints = ("d_model n_layer n_head n_kv_head_local n_kv_head_global head_dim_local "
            "head_dim_global k_eq_v window d_ff double_wide n_kv_shared d_ple n_vocab n_expert "
            "top_k d_expert").split()
    d = {k: int(m.get(k, "0")) for k in ints}
    d["name"] = m.get("name")
    d["layer_kinds"] = m.get("layer_kinds").strip()
    return d


def kv_donor(d, layer):
    """The layer whose KV this layer reads (graph/model_desc.c: the last n_kv_shared layers
    reuse the last owning layer of the same kind)."""
    first_shared = d["n_layer"] - d["n_kv_shared"]
    if layer < first_shared:
        return layer
    kind = d["layer_kinds"][layer]
    for j in range(first_shared - 1, -1, -1):
        if d["layer_kinds"][j] == kind:
            return j
    return layer


def floor_bytes(d, rows, ctx, local_width):
    """Bytes one decode step must read (docs/benchmarks.md; the same count as bench_decode):
    non-expert weights, the expected distinct experts of `rows` rows, the tied LM head, and
    every row's KV at `ctx` tokens (window-capped locally, local elements local_width bytes)."""
    w, experts_all = d["n_vocab"] * d["d_model"], 0.0
    for l in range(d["n_layer"]):
        full = d["layer_kinds"][l] == "F"
        hd = d["head_dim_global"] if full else d["head_dim_local"]
        kv = (d["n_kv_head_global"] if full else d["n_kv_head_local"]) * hd
        w += 2 * d["n_head"] * hd * d["d_model"]
        if kv_donor(d, l) == l:
            w += kv * d["d_model"] * (1 if (full and d["k_eq_v"]) else 2)
        d_ff = d["d_ff"] * (2 if d["double_wide"] and kv_donor(d, l) != l else 1)
        w += 3 * d_ff * d["d_model"]
        if d["n_expert"]:
            w += d["n_expert"] * d["d_model"]
            experts_all += 2.0 * d["n_expert"] * 3 * d["d_expert"] * d["d_model"]
        if d["d_ple"]:
            w += 2 * d["d_ple"] * d["d_model"]
    distinct = 0.0
    if d["n_expert"]:
        distinct = d["n_expert"] * (1 - (1 - d["top_k"] / d["n_expert"]) ** rows)
    experts = experts_all * distinct / d["n_expert"] if d["n_expert"] else 0.0
    kv_b = kv_local = 0.0
    for l in range(d["n_layer"]):
        full = d["layer_kinds"][l] == "F"
        keys = ctx if full else min(ctx, d["window"])
        hd = d["head_dim_global"] if full else d["head_dim_local"]
        n = keys * (d["n_kv_head_global"] if full else d["n_kv_head_local"]) * hd * 2
        if full:
            kv_b += n * 2
        else:
            kv_b += n * local_width
            kv_local += n * local_width
    return {"weights": 2.0 * w, "experts": experts, "kv": kv_b * rows,
            "kv_local": kv_local * rows, "distinct_experts": distinct,
            "total": 2.0 * w + experts + kv_b * rows}


def prefill_flops(d, prompt):
    """FLOPs of one prompt's prefill (docs/benchmarks.md: 2 x active parameters x tokens plus
    attention): every matrix weight a token meets (the embedding is a lookup; the routed
    experts, top_k of them; the tied LM head only for the last token, the one the engine asks
    logits of), and per layer q.k and p.v over each token's keys (window-capped locally)."""
    per_token, attn = 0.0, 0.0
    for l in range(d["n_layer"]):
        full = d["layer_kinds"][l] == "F"
        hd = d["head_dim_global"] if full else d["head_dim_local"]
        kv = (d["n_kv_head_global"] if full else d["n_kv_head_local"]) * hd
        per_token += 2 * d["n_head"] * hd * d["d_model"]  # q and o
        if kv_donor(d, l) == l:
            per_token += kv * d["d_model"] * (1 if (full and d["k_eq_v"]) else 2)
        d_ff = d["d_ff"] * (2 if d["double_wide"] and kv_donor(d, l) != l else 1)
        per_token += 3 * d_ff * d["d_model"]
        if d["n_expert"]:
            per_token += d["n_expert"] * d["d_model"]  # the router
            per_token += d["top_k"] * 3 * d["d_expert"] * d["d_model"]
        if d["d_ple"]:
            per_token += 2 * d["d_ple"] * d["d_model"]
        w = prompt if full or not d["window"] else d["window"]
        # keys of the token at position p: min(p + 1, w); summed over p in [0, prompt)
        keys = sum(min(p + 1, w) for p in range(prompt))
        attn += 2 * 2 * d["n_head"] * hd * keys
    return 2.0 * per_token * prompt + 2.0 * d["n_vocab"] * d["d_model"] + attn


# ---- running g4pipe -----------------------------------------------------------------------

class Server:
    """One g4pipe process reading the protocol on stdin; stderr goes to a log file."""

    def __init__(self, binary, conf, sets, log_path):
        cmd = [binary, "-c", conf]
        for s in sets:
            cmd += ["--set", s]
        self.errlog = open(log_path, "w")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.errlog, text=True, bufsize=1)
        self.cmd = cmd

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def wait_done(self, ids, gaps=None):
        """Reads lines until every id in ids has its done line; returns {id: done}. With gaps
        (a dict), gaps[id] collects the ms between the id's consecutive token lines, per token
        (a token held back inside a multi-byte character shares the next line's gap)."""
        want, done, last = set(ids), {}, {}
        while want:
            line = self.p.stdout.readline()
            now = time.monotonic()
            if not line:
                self.errlog.flush()
                with open(self.errlog.name) as f:
                    why = [x.strip() for x in f if "error" in x][:1]
                raise RuntimeError(f"g4pipe exited ({' '.join(self.cmd)}): "
                                   f"{why[0] if why else 'no error line'}; see {self.errlog.name}")
            ev = json.loads(line)
            if ev.get("event") == "error":
                raise RuntimeError(f"g4pipe answered an error: {line.strip()}")
            if gaps is not None and ev.get("event") == "token" and ev.get("id") in want:
                rid, idx = ev["id"], ev["index"]
                if rid in last and idx > last[rid][1]:
                    step = (now - last[rid][0]) * 1e3 / (idx - last[rid][1])
                    gaps.setdefault(rid, []).extend([step] * (idx - last[rid][1]))
                last[rid] = (now, idx)
            if ev.get("event") == "done" and ev.get("id") in want:
                want.discard(ev["id"])
                done[ev["id"]] = ev
        return done

    def close(self):
        try:
            self.send({"cmd": "shutdown"})
            self.p.stdin.close()
            self.p.wait(timeout=120)
        except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
            self.p.kill()
        self.errlog.close()


def gpu_memory_mb():
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20).stdout.split()
        return float(out[0]) if out else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def measure(server, c, prompt, output, vocab, rng, tag, sampling=None):
    """c requests at once; returns the per-request figures and the wall time. sampling: the
    requests' temperature / top_k (none: greedy), each request with its own seed."""
    ids = [f"{tag}-{i}" for i in range(c)]
    t0 = time.monotonic()
    for i, rid in enumerate(ids):
        toks = [2] + [rng.randrange(min(1000, vocab // 2), vocab) for _ in range(prompt - 1)]
        req = {"id": rid, "tokens": toks, "max_tokens": output, "ignore_eos": True,
               "stream": True}
        if sampling:
            req.update(sampling, seed=i + 1)
        server.send(req)
    gaps = {}
    done = server.wait_done(ids, gaps)
    wall = time.monotonic() - t0
    reqs = [{"ttft_ms": d["timing"]["ttft_ms"],
             "decode_ms_per_token": d["timing"]["decode_ms_per_token"],
             "completion_tokens": d["usage"]["completion_tokens"],
             "step_gaps_ms": [round(g, 4) for g in gaps.get(rid, [])]} for rid, d in done.items()]
    return reqs, wall


# ---- the report ---------------------------------------------------------------------------

def round_step_ms(run):
    """One measurement's decode step: the median gap between token lines over its requests."""
    g = [x for q in run["requests"] for x in q["step_gaps_ms"]]
    return statistics.median(g) if g else 0.0


def summarize(runs, d, args, cfg):
    out = []
    for c in args.concurrency:
        rr = [r for r in runs if r["config"] == cfg["label"] and r["c"] == c]
        dec = [g for r in rr for q in r["requests"] for g in q["step_gaps_ms"]] or [0.0]
        tpot = [q["decode_ms_per_token"] for r in rr for q in r["requests"]]
        ttft = [q["ttft_ms"] for r in rr for q in r["requests"]]
        round_med = [round_step_ms(r) for r in rr]
        round_ttft = [pct([q["ttft_ms"] for q in r["requests"]], 0.5) for r in rr]
        toks = [sum(q["completion_tokens"] for q in r["requests"]) / r["wall_s"] for r in rr]
        fl = floor_bytes(d, c, args.prompt + args.output // 2, cfg["local_width"])
        # prefill: the c prompts' FLOPs over the time the last of them took to its first token
        ttft_last_s = pct(ttft, 0.99) / 1e3
        pf_rate = c * prefill_flops(d, args.prompt) / ttft_last_s if ttft_last_s > 0 else 0.0
        med = statistics.median(dec)
        floor_ms = fl["total"] / (args.bw * 1e6)
        mem = [r["gpu_mem_mb"] for r in rr if r["gpu_mem_mb"] is not None]
        out.append({"c": c, "decode_step_ms_median": med, "decode_step_ms_p90": pct(dec, 0.9),
                    "tpot_ms_median": statistics.median(tpot),
                    "round_medians_ms": round_med,
                    "spread_ms": max(round_med) - min(round_med),
                    "tokens_per_s": statistics.median(toks),
                    "ttft_ms_p50": pct(ttft, 0.5), "ttft_ms_p99": pct(ttft, 0.99),
                    "ttft_round_p50_ms": round_ttft,
                    "ttft_spread_ms": max(round_ttft) - min(round_ttft),
                    "floor_gb": fl["total"] / 1e9, "floor_ms": floor_ms,
                    "floor_kv_local_gb": fl["kv_local"] / 1e9,
                    "fraction_of_floor": floor_ms / med if med > 0 else None,
                    "prefill_tflops": pf_rate / 1e12,
                    "prefill_fraction_of_matrix_rate": pf_rate / (args.tflops * 1e12),
                    "gpu_mem_mb": max(mem) if mem else None})
    return out


def compare(a, b, args):
    rows = []
    for sa, sb in zip(a["summary"], b["summary"]):
        delta = sa["decode_step_ms_median"] - sb["decode_step_ms_median"]  # > 0: B faster
        spread = max(sa["spread_ms"], sb["spread_ms"])
        predicted = (sa["floor_gb"] - sb["floor_gb"]) * 1e9 / (args.bw * 1e6)
        # first-token time: B - A, > 0 when B is later; flat within either side's round spread
        tdelta = sb["ttft_ms_p50"] - sa["ttft_ms_p50"]
        tspread = max(sa["ttft_spread_ms"], sb["ttft_spread_ms"])
        rows.append({"c": sa["c"], "gain_ms": delta,
                     "gain_pct": 100 * delta / sa["decode_step_ms_median"],
                     "predicted_gain_ms": predicted, "spread_ms": spread,
                     "verdict": "flat" if abs(delta) <= spread else
                     ("B faster" if delta > 0 else "B slower") +
                     ("" if len(sa["round_medians_ms"]) > 1 else " (one round: no spread)"),
                     "ttft_p50_delta_ms": tdelta, "ttft_spread_ms": tspread,
                     "ttft_verdict": "flat" if abs(tdelta) <= tspread else
                     ("B later" if tdelta > 0 else "B earlier") +
                     ("" if len(sa["ttft_round_p50_ms"]) > 1 else " (one round: no spread)")})
    return rows


def sampling_text(sampling):
    if sampling == "greedy":
        return "greedy"
    k = sampling.get("top_k", 0)
    return f"sampled at temperature {sampling['temperature']:g}" + (f", top_k {k}" if k else "")


def markdown(result):
    a, b = result["configs"]
    lines = [f"# g4pipe serving A/B: {a['label']} vs {b['label']}", "",
             f"{result['model']}, {result['card']}, commit {result['commit']}, "
             f"{result['prompt']}-token prompts, {result['output']} output tokens, "
             f"{sampling_text(result.get('sampling', 'greedy'))}, "
             f"{result['rounds']} paired rounds, {result['weights']} weights, "
             f"floor at {result['bw_gbps']:.0f} GB/s, prefill against "
             f"{result['matrix_tflops']:.0f} TFLOP/s", "",
             "| config | c | decode step median (p90) | round spread | time per output token | "
             "tok/s | TTFT p50 (p99) | floor | fraction | prefill TFLOP/s (fraction) | "
             "GPU memory |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for cfg in (a, b):
        for s in cfg["summary"]:
            mem = f"{s['gpu_mem_mb'] / 1e3:.1f} GB" if s["gpu_mem_mb"] else "n/a"
            frac = f"{s['fraction_of_floor']:.3f}" if s["fraction_of_floor"] else "n/a"
            lines.append(f"| {cfg['label']} | {s['c']} | {s['decode_step_ms_median']:.3f} ms "
                         f"({s['decode_step_ms_p90']:.3f}) | {s['spread_ms']:.3f} ms | "
                         f"{s['tpot_ms_median']:.3f} ms | {s['tokens_per_s']:.1f} | {s['ttft_ms_p50']:.1f} ms "
                         f"({s['ttft_ms_p99']:.1f}) | {s['floor_ms']:.3f} ms | {frac} | "
                         f"{s['prefill_tflops']:.3g} ({s['prefill_fraction_of_matrix_rate']:.3g}) | "
                         f"{mem} |")
    lines += ["", f"| c | {b['label']} vs {a['label']}: decode-step gain | predicted from bytes | "
              "verdict | TTFT p50 change (spread) | TTFT verdict |", "|---|---|---|---|---|---|"]
    for r in result["comparison"]:
        lines.append(f"| {r['c']} | {r['gain_ms']:+.3f} ms ({r['gain_pct']:+.1f}%) | "
                     f"{r['predicted_gain_ms']:+.3f} ms | {r['verdict']} | "
                     f"{r['ttft_p50_delta_ms']:+.1f} ms ({r['ttft_spread_ms']:.1f}) | "
                     f"{r['ttft_verdict']} |")
    return "\n".join(lines) + "\n"


def git_commit():
    if os.environ.get("G4PIPE_COMMIT"):  # a copy of the tree without .git (the GPU box)
        return os.environ["G4PIPE_COMMIT"]
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        # tracked files that differ from HEAD: the results are not that commit's (on the GPU
        # box the copy's HEAD was main's while the files were another branch's)
        changed = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        return (head + "+dirty" if head and changed else head) or "nogit"
    except OSError:
        return "nogit"


def card_name():
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        if out:
            return out.splitlines()[0]
    return "cpu"


# ---- main ---------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="g4pipe serving A/B (docs/benchmarks.md)")
    p.add_argument("-c", dest="conf", required=True, help="g4pipe INI configuration")
    p.add_argument("--set", action="append", default=[], help="override for both (k=v)")
    for x in "ab":
        p.add_argument(f"--{x}-label", default=x.upper())
        p.add_argument(f"--{x}-set", action="append", default=[], help=f"override for {x}")
        p.add_argument(f"--{x}-bin", default=os.path.join(ROOT, "build", "g4pipe"))
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--prompt", type=int, default=1024)
    p.add_argument("--output", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--checkpoint", action="store_true",
                   help="use the configuration's checkpoint instead of model.weights = dummy")
    p.add_argument("--bw", type=float, default=4280.0, help="copy bandwidth, GB/s")
    p.add_argument("--tflops", type=float, default=780.0,
                   help="bf16 matrix rate, TFLOP/s (docs/benchmarks.md: 780 on the H200 of record)")
    p.add_argument("--model-desc", default="", help="graph/models INI (default: from -c)")
    p.add_argument("--out", default=os.path.join(ROOT, "release", "results"))
    p.add_argument("--logs", default="", help="folder for each process's stderr (default: --out)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sample every request at this temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, default=0,
                   help="with --temperature: the requests' top_k (0: the whole vocabulary)")
    p.add_argument("--max-seconds", type=float, default=0,
                   help="start no round that would end past this many seconds (0: no limit); "
                        "the report covers the rounds done")
    p.add_argument("--load", default="",
                   help="the load benchmark: request rates (req/s, comma-separated) instead of "
                        "--concurrency")
    p.add_argument("--requests", type=int, default=32, help="--load: requests a rate")
    p.add_argument("--prompt-dist", default="128:8192",
                   help="--load: prompt tokens lo:hi, drawn log-uniform")
    p.add_argument("--output-dist", default="64:512",
                   help="--load: output tokens lo:hi, drawn uniform")
    p.add_argument("--rate-timeout", type=float, default=1800,
                   help="--load: seconds one rate's run may take before the bench gives up")
    a = p.parse_args(argv)
    a.rates = []
    if a.load:
        try:
            a.rates = [float(x) for x in a.load.split(",") if x]
        except ValueError:
            fail(f"--load takes rates separated by commas, not {a.load!r}")
        if not a.rates or min(a.rates) <= 0:
            fail("--load needs at least one rate > 0")
        if a.requests < 1:
            fail("--requests must be >= 1")
        try:
            a.prompt_lo_hi = load.parse_dist(a.prompt_dist, "--prompt-dist")
            a.output_lo_hi = load.parse_dist(a.output_dist, "--output-dist")
        except ValueError as e:
            fail(str(e))
        if a.prompt_lo_hi[0] < 2:
            fail("--prompt-dist: prompts need at least 2 tokens")
    try:
        a.concurrency = [int(x) for x in a.concurrency.split(",") if x]
    except ValueError:
        fail(f"--concurrency takes numbers separated by commas, not {a.concurrency!r}")
    if not a.concurrency or min(a.concurrency) < 1:
        fail("--concurrency needs at least one number >= 1")
    if a.prompt < 2 or a.output < 2 or a.rounds < 1:
        fail("--prompt and --output must be >= 2, --rounds >= 1")
    if a.temperature < 0 or a.top_k < 0:
        fail("--temperature and --top-k cannot be negative")
    for b in (a.a_bin, a.b_bin):
        if not os.access(b, os.X_OK):
            fail(f"{b} is not an executable g4pipe (build it with ./build.sh)")
    return a


def main(argv):
    args = parse_args(argv)
    common = list(args.set)
    if not args.checkpoint:
        common.append("model.weights=dummy")
    conf = read_ini(args.conf)
    if not args.rates and conf.getint("serve", "max_batch", fallback=16) < max(args.concurrency):
        common.append(f"serve.max_batch={max(args.concurrency)}")
    longest = (args.prompt_lo_hi[1] + args.output_lo_hi[1]) if args.rates else \
        args.prompt + args.output
    if conf.getint("serve", "max_context", fallback=32768) < longest:
        fail(f"serve.max_context of {args.conf} is under the longest prompt plus output "
             f"({longest} tokens)")
    cfgs = []
    for x in "ab":
        sets = common + getattr(args, f"{x}_set")
        width = 1 if any(s.replace(" ", "") == "kv.local=fp8" for s in sets) else 2
        cfgs.append({"label": getattr(args, f"{x}_label"), "bin": getattr(args, f"{x}_bin"),
                     "sets": sets, "local_width": width})
    if cfgs[0]["label"] == cfgs[1]["label"]:
        fail("the two configurations need different labels")
    d = model_desc(args.conf, common + cfgs[0]["sets"], args.model_desc)
    os.makedirs(args.out, exist_ok=True)
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    card = card_name()
    base = os.path.join(args.out, f"{git_commit()}-{card.replace(' ', '_')}-{stamp}")
    if args.rates:
        return load_main(args, cfgs, d, base, card, stamp)
    rng = random.Random(args.seed)
    sampling = ({"temperature": args.temperature, "top_k": args.top_k}
                if args.temperature > 0 else None)
    runs, total = [], 2 * args.rounds * len(args.concurrency)
    t_start, rounds_done = time.monotonic(), 0
    for rnd in range(args.rounds):
        used = time.monotonic() - t_start
        if args.max_seconds and rnd > 0 and used + used / rnd > args.max_seconds:
            log(f"stopping after {rnd} of {args.rounds} rounds: another round ({used / rnd:.0f} s) "
                f"would pass --max-seconds {args.max_seconds:.0f}")
            break
        order = cfgs if rnd % 2 == 0 else cfgs[::-1]  # ABBA: neither side always goes first
        for cfg in order:
            logs = os.path.join(args.logs, os.path.basename(base)) if args.logs else base
            srv = Server(cfg["bin"], args.conf, cfg["sets"], f"{logs}.{cfg['label']}.r{rnd}.log")
            try:
                srv.send({"id": "warm", "tokens": [2, 3, 4, 5], "max_tokens": 2,
                          "ignore_eos": True, "stream": False})
                srv.wait_done(["warm"])
                for c in args.concurrency:
                    reqs, wall = measure(srv, c, args.prompt, args.output, d["n_vocab"], rng,
                                         f"r{rnd}c{c}", sampling)
                    runs.append({"round": rnd, "config": cfg["label"], "c": c, "wall_s": wall,
                                 "gpu_mem_mb": gpu_memory_mb(), "requests": reqs})
                    med = round_step_ms(runs[-1])
                    log(f"[{len(runs)}/{total}] round {rnd + 1} {cfg['label']} c={c}: decode "
                        f"step {med:.3f} ms, {wall:.1f} s")
            except RuntimeError as e:
                srv.close()
                fail(str(e))
            srv.close()
        rounds_done = rnd + 1
    for cfg in cfgs:
        cfg["summary"] = summarize(runs, d, args, cfg)
    result = {"model": d["name"], "card": card, "commit": git_commit(), "time": stamp,
              "prompt": args.prompt, "output": args.output, "rounds": rounds_done,
              "sampling": sampling or "greedy",
              "weights": "checkpoint" if args.checkpoint else "dummy", "bw_gbps": args.bw,
              "matrix_tflops": args.tflops,
              "configs": [{k: v for k, v in c.items()} for c in cfgs],
              "comparison": compare(cfgs[0], cfgs[1], args), "runs": runs}
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    md = markdown(result)
    with open(base + ".md", "w") as f:
        f.write(md)
    plot_png.bar_chart(base + ".png", f"DECODE STEP MS {d['name'].upper()}",
                       [f"C{c}" for c in args.concurrency],
                       [(c["label"].upper(), [s["decode_step_ms_median"] for s in c["summary"]])
                        for c in cfgs],
                       [s["floor_ms"] for s in cfgs[0]["summary"]])
    sys.stdout.write(md)
    log(f"wrote {base}.json, .md and .png")
    return 0


def load_main(args, cfgs, d, base, card, stamp):
    """--load: every configuration through every rate's schedule (the same for both), rounds in
    ABBA order; the records of all rounds pooled per configuration and rate."""
    plans = {r: load.schedule(args.seed, r, args.requests, args.prompt_lo_hi, args.output_lo_hi,
                              d["n_vocab"]) for r in args.rates}
    records = {(c["label"], r): [] for c in cfgs for r in args.rates}
    walls = {k: 0.0 for k in records}
    total, n = 2 * args.rounds * len(args.rates), 0
    t_start, rounds_done = time.monotonic(), 0
    for rnd in range(args.rounds):
        used = time.monotonic() - t_start
        if args.max_seconds and rnd > 0 and used + used / rnd > args.max_seconds:
            log(f"stopping after {rnd} of {args.rounds} rounds: another round ({used / rnd:.0f} s) "
                f"would pass --max-seconds {args.max_seconds:.0f}")
            break
        rounds_done = rnd + 1
        for cfg in (cfgs if rnd % 2 == 0 else cfgs[::-1]):
            logs = os.path.join(args.logs, os.path.basename(base)) if args.logs else base
            srv = load.LoadServer(cfg["bin"], args.conf, cfg["sets"],
                                  f"{logs}.{cfg['label']}.r{rnd}.log")
            try:
                warm = load.schedule(args.seed, 1.0, 1, (4, 4), (2, 2), d["n_vocab"])
                load.run_rate(srv, [dict(warm[0], at=0.0)], f"warm{rnd}", args.rate_timeout)
                for rate in args.rates:
                    recs, wall = load.run_rate(srv, plans[rate], f"r{rnd}q{rate:g}",
                                               args.rate_timeout)
                    records[(cfg["label"], rate)] += recs
                    walls[(cfg["label"], rate)] += wall
                    n += 1
                    s = load.summarize_rate(rate, recs, wall)
                    log(f"[{n}/{total}] round {rnd + 1} {cfg['label']} rate {rate:g}/s: "
                        f"{s['completed']}/{s['requests']} done, TTFT p50 "
                        f"{load.fmt(s['ttft_ms']['p50'])} ms, TPOT p50 "
                        f"{load.fmt(s['tpot_ms']['p50'], 2)} ms, {wall:.1f} s")
            except RuntimeError as e:
                srv.close()
                fail(str(e))
            srv.close()
    for cfg in cfgs:
        cfg["load"] = [load.summarize_rate(r, records[(cfg["label"], r)],
                                           walls[(cfg["label"], r)]) for r in args.rates]
    result = {"model": d["name"], "card": card, "commit": git_commit(), "time": stamp,
              "mode": "load", "rates": args.rates, "requests": args.requests,
              "rounds": rounds_done, "seed": args.seed, "prompt_dist": list(args.prompt_lo_hi),
              "output_dist": list(args.output_lo_hi),
              "weights": "checkpoint" if args.checkpoint else "dummy",
              "schedule": {f"{r:g}": [{"at": q["at"], "prompt": q["prompt"],
                                       "output": q["output"]} for q in plans[r]]
                           for r in args.rates},
              "configs": cfgs,
              "records": {f"{k[0]}@{k[1]:g}": [load.request_figures(q) for q in recs]
                          for k, recs in records.items()}}
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    md = load.markdown(result)
    with open(base + ".md", "w") as f:
        f.write(md)
    plot_png.bar_chart(base + ".png", f"TPOT P50 MS {d['name'].upper()}",
                       [f"R{r:g}" for r in args.rates],
                       [(c["label"].upper(), [s["tpot_ms"]["p50"] or 0.0 for s in c["load"]])
                        for c in cfgs],
                       [None] * len(args.rates))
    sys.stdout.write(md)
    log(f"wrote {base}.json, .md and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
