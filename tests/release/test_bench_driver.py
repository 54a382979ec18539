#!/usr/bin/env python3
"""tests/release/test_bench_driver.py - the serving A/B driver (release/bench.py) end to end on
the CPU backend with the tiny-moe fixture (two configurations, two concurrencies, two rounds),
its floor arithmetic against docs/benchmarks.md's reference figures, and its refusals. Prints
PASS/FAIL lines (tests/harness.h's format); exits 1 on any FAIL. Timing values are checked for
presence and sign only: timing is never asserted (docs/benchmarks.md)."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "release"))
import bench  # noqa: E402

failures = 0


def check(gate, ok, msg):
    global failures
    print(f"{'PASS' if ok else 'FAIL'} {gate}: {msg}", flush=True)
    failures += not ok


def png_ok(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return False, "no PNG signature or IHDR"
    w, h = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        crc = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0]
        if zlib.crc32(kind + body) & 0xffffffff != crc:
            return False, f"bad CRC in {kind!r}"
        if kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    return len(raw) == h * (1 + 3 * w), f"{w}x{h}, {len(raw)} bytes of scanlines"


def main():
    binary = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"), "g4pipe")
    out = tempfile.mkdtemp(prefix="g4bench")
    cmd = [sys.executable, os.path.join(ROOT, "release", "bench.py"), "-c",
           os.path.join(ROOT, "conf", "demo.ini"), "--checkpoint", "--set", "debug.backend=cpu",
           "--a-bin", binary, "--b-bin", binary, "--a-label", "chunk256", "--b-label", "chunk16",
           "--b-set", "serve.prefill_chunk=16", "--concurrency", "1,2", "--prompt", "24",
           "--output", "6", "--rounds", "2", "--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    files = sorted(os.listdir(out))
    js = [f for f in files if f.endswith(".json")]
    check("release_driver_runs", p.returncode == 0 and len(js) == 1,
          f"exit {p.returncode}, files {len(files)}; {p.stderr.strip().splitlines()[-1:]}")
    if p.returncode != 0 or len(js) != 1:
        return
    base = os.path.join(out, js[0][:-5])
    r = json.load(open(base + ".json"))
    summ = [s for c in r["configs"] for s in c["summary"]]
    good = all(s["decode_step_ms_median"] > 0 and s["ttft_ms_p50"] > 0 and s["tokens_per_s"] > 0
               and s["floor_ms"] > 0 for s in summ)
    progress = p.stderr.count("] round ")
    # the decode step comes from the gaps between streamed token lines: one per token after
    # the first, none negative
    gaps_ok = all(len(q["step_gaps_ms"]) == q["completion_tokens"] - 1 and
                  all(g >= 0 for g in q["step_gaps_ms"]) for x in r["runs"] for q in x["requests"])
    check("release_driver_json", len(r["runs"]) == 8 and len(summ) == 4 and good and
          all(x["verdict"] in ("flat", "B faster", "B slower") and
              x["ttft_verdict"] in ("flat", "B later", "B earlier") for x in r["comparison"]) and
          progress == 8 and all(len(x["requests"]) == x["c"] for x in r["runs"]) and gaps_ok,
          f"{len(r['runs'])} measurements (2 rounds x 2 configs x 2 concurrencies), "
          f"{progress} progress lines, every summary positive: {good}, a step gap per token "
          f"after the first: {gaps_ok}")
    md = open(base + ".md").read()
    rows = [l for l in md.splitlines() if l.startswith("| chunk")]
    check("release_driver_markdown", len(rows) == 4 and "| 2 |" in md and md == p.stdout,
          f"{len(rows)} config rows, comparison rows for c=1 and c=2, same text on stdout")
    ok, why = png_ok(base + ".png")
    check("release_driver_png", ok, why)

    # sampled requests (--temperature): every request samples over the whole vocabulary with
    # its own seed, and the report says so
    out_s = tempfile.mkdtemp(prefix="g4bench")
    p = subprocess.run(cmd[:cmd.index("--out")] + ["--out", out_s, "--temperature", "0.8"]
                       + ["--concurrency", "2", "--rounds", "1"], capture_output=True, text=True,
                       timeout=600)
    js = [f for f in os.listdir(out_s) if f.endswith(".json")]
    rs = json.load(open(os.path.join(out_s, js[0]))) if p.returncode == 0 and len(js) == 1 else {}
    toks = [q["completion_tokens"] for x in rs.get("runs", []) for q in x["requests"]]
    check("release_driver_sampled", rs.get("sampling") == {"temperature": 0.8, "top_k": 0} and
          len(toks) == 4 and all(t == 6 for t in toks) and "temperature 0.8" in p.stdout,
          f"exit {p.returncode}, sampling {rs.get('sampling')}, completion tokens {toks} "
          f"(want 4 requests of 6), the table's header names the temperature")

    # the floor against docs/benchmarks.md: 26B-A4B, 1 row at 1K context = 7.64 GB of weights
    # (4.79 dense + 2.86 routed) and 0.23 GB of KV; fp8 halves the local family only
    d = bench.model_desc(None, [], os.path.join(ROOT, "graph", "models", "gemma4-26b-a4b.ini"))
    bf, f8 = bench.floor_bytes(d, 1, 1024, 2), bench.floor_bytes(d, 1, 1024, 1)
    w = (bf["weights"] + bf["experts"]) / 1e9
    check("release_floor_bytes", abs(w - 7.64) < 0.01 and abs(bf["kv"] / 1e9 - 0.23) < 0.005 and
          abs((bf["kv"] - f8["kv"]) - bf["kv_local"] / 2) < 1 and
          abs(bench.floor_bytes(d, 16, 1024, 2)["distinct_experts"] - 82.4) < 0.1,
          f"weights {w:.3f} GB, KV {bf['kv'] / 1e9:.3f} GB (docs/benchmarks.md: 7.64, 0.23); fp8 saves "
          f"{(bf['kv'] - f8['kv']) / 1e6:.1f} MB = half the local family; 82.4 experts at 16 rows")

    # prefill FLOPs (docs/benchmarks.md: 2 x active parameters x tokens + attention): one token's matrix
    # weights plus the embedding are the models' named sizes, 30.7 B (31B) and 3.8 B active
    # (26B-A4B); attention grows with each token's keys, window-capped on local layers
    sizes = {}
    for m in ("gemma4-31b", "gemma4-26b-a4b"):
        dm = bench.model_desc(None, [], os.path.join(ROOT, "graph", "models", f"{m}.ini"))
        one = bench.prefill_flops(dm, 1)
        lm = 2.0 * dm["n_vocab"] * dm["d_model"]
        att1 = sum(4 * dm["n_head"] * (dm["head_dim_global"] if k == "F" else dm["head_dim_local"])
                   for k in dm["layer_kinds"])
        sizes[m] = ((one - lm - att1) / 2 + dm["n_vocab"] * dm["d_model"]) / 1e9
    two_w = bench.prefill_flops(d, 2 * d["window"]) - 2 * bench.prefill_flops(d, d["window"])
    check("release_prefill_flops", abs(sizes["gemma4-31b"] - 30.7) < 0.2 and
          abs(sizes["gemma4-26b-a4b"] - 3.8) < 0.1 and two_w > 0,
          f"parameters a token meets: {sizes['gemma4-31b']:.2f} B (31B), "
          f"{sizes['gemma4-26b-a4b']:.2f} B (26B-A4B); 2W tokens cost more than twice W "
          f"({two_w / 1e12:.3f} TFLOP more: the global layers' keys keep growing)")

    # the load benchmark (--load): two rates, both configurations, the same seeded schedule
    def run_load(args, timeout):
        """bench.py's load mode, the A/B's configurations: (process, JSON or {}, out, names)"""
        where = tempfile.mkdtemp(prefix="g4load")
        q = subprocess.run(cmd[:cmd.index("--concurrency")] + args + ["--out", where],
                           capture_output=True, text=True, timeout=timeout)
        names = [f for f in os.listdir(where) if f.endswith(".json")]
        got = (json.load(open(os.path.join(where, names[0])))
               if q.returncode == 0 and len(names) == 1 else {})
        return q, got, where, names

    p, rl, out_l, js = run_load(["--load", "4,16", "--requests", "6", "--prompt-dist", "8:48",
                                 "--output-dist", "2:6", "--rounds", "2"], 600)
    summ = [s for c in rl.get("configs", []) for s in c.get("load", [])]
    figures_ok = all(s["requests"] == 12 and s["completed"] + sum(s["errors"].values()) == 12
                     and s["ttft_ms"]["p50"] > 0 and s["ttft_ms"]["p99"] >= s["ttft_ms"]["p50"]
                     and s["tpot_ms"]["p50"] > 0 and s["output_tokens_per_s"] > 0
                     and s["e2e_ms"]["p99"] >= s["ttft_ms"]["p99"] for s in summ)
    recs = rl.get("records", {})
    # every completed request got exactly the output it asked for (ignore_eos), on both sides
    lengths_ok = bool(recs) and all(q["error"] is None and q["tokens"] == q["output"]
                                    for v in recs.values() for q in v)
    progress = p.stderr.count(" rate ")
    check("release_load_runs", rl.get("mode") == "load" and len(summ) == 4 and figures_ok and
          lengths_ok and progress >= 8,
          f"exit {p.returncode}, {len(summ)} summaries (2 configs x 2 rates, 2 rounds of 6 "
          f"requests pooled), figures positive and ordered: {figures_ok}, every request its "
          f"asked length: {lengths_ok}, {progress} progress lines")
    md = open(os.path.join(out_l, js[0][:-5] + ".md")).read() if rl else ""
    ok, why = png_ok(os.path.join(out_l, js[0][:-5] + ".png")) if rl else (False, "no run")
    check("release_load_report", md == p.stdout and len([l for l in md.splitlines()
                                                          if l.startswith("| chunk")]) == 4 and ok,
          f"4 config x rate rows, the same text on stdout, PNG: {why}")

    # the schedule: seeded (the same twice, another seed another), Poisson gaps of mean
    # 1/rate, log-uniform prompts (median sqrt(lo * hi)), uniform outputs; fixed seeds, so
    # these figures are the same on every run
    a1 = bench.load.schedule(7, 2.0, 4000, (128, 8192), (64, 512), 262144)
    a2 = bench.load.schedule(7, 2.0, 4000, (128, 8192), (64, 512), 262144)
    b1 = bench.load.schedule(8, 2.0, 4000, (128, 8192), (64, 512), 262144)
    gaps = [a1[0]["at"]] + [y["at"] - x["at"] for x, y in zip(a1, a1[1:])]
    mean_gap = sum(gaps) / len(gaps)
    cv = (sum((g - mean_gap) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean_gap
    med_prompt = sorted(q["prompt"] for q in a1)[len(a1) // 2]
    mean_out = sum(q["output"] for q in a1) / len(a1)
    bounds = all(128 <= q["prompt"] <= 8192 and 64 <= q["output"] <= 512 and
                 len(q["tokens"]) == q["prompt"] for q in a1)
    check("release_load_schedule", a1 == a2 and a1 != b1 and abs(mean_gap - 0.5) < 0.025 and
          abs(cv - 1) < 0.05 and abs(med_prompt / 1024 - 1) < 0.1 and abs(mean_out - 288) < 8
          and bounds,
          f"same seed same schedule: {a1 == a2}, another seed differs: {a1 != b1}; mean gap "
          f"{mean_gap:.4f} s (1/rate 0.5), its coefficient of variation {cv:.3f} (exponential: 1), "
          f"median prompt {med_prompt} (sqrt(128 x 8192) = 1024), mean output {mean_out:.1f} "
          f"(288), all in bounds: {bounds}")

    # in flight (mean): two requests open the whole second of the span and one open half of it
    # make 2.5 on average; errors count while open, as they hold a slot until refused
    def rec(sent, done, error=None):
        return {"sent": sent, "first": sent + 0.1, "last": done, "done": done, "tokens": 2,
                "gaps": [], "error": error, "prompt": 8, "output": 2, "server_ttft_ms": None}
    fl = bench.load.summarize_rate(1.0, [rec(0.0, 1.0), rec(0.0, 1.0), rec(0.25, 0.75, "full")],
                                   1.0)
    # two rounds pooled, 100 s apart (the other configuration ran between): the rates are over
    # the runs' summed wall time (2 s), not first send to last answer (101 s)
    pooled = bench.load.summarize_rate(1.0, [rec(0.0, 1.0), rec(100.0, 101.0)], 2.0)
    pooled_ok = (abs(pooled["in_flight_mean"] - 1.0) < 1e-9 and
                 abs(pooled["request_throughput"] - 1.0) < 1e-9)
    flights = [s.get("in_flight_mean", -1) for s in summ]
    check("release_load_in_flight",
          abs(fl["in_flight_mean"] - 2.5) < 1e-9 and pooled_ok and bool(flights) and
          all(0 < f <= 6 for f in flights) and "in flight (mean)" in md,
          f"hand-made run: {fl['in_flight_mean']:.3f} (2.5); two runs 100 s apart: "
          f"{pooled['in_flight_mean']:.3f} in flight, {pooled['request_throughput']:.3f} req/s "
          f"(1, 1: their own 2 s); the load run's rates: "
          f"{['%.2f' % f for f in flights]} (each in (0, 6]: 6 requests a round); in the report: "
          f"{'in flight (mean)' in md}")

    # --max-seconds in the load mode: a second round that would pass it is not started, and the
    # report says one round was done
    p, rm, _, _ = run_load(["--load", "16", "--requests", "2", "--prompt-dist", "8:16",
                            "--output-dist", "2:3", "--rounds", "2", "--max-seconds", "0.001"], 300)
    stopped = "stopping after 1 of 2 rounds" in p.stderr
    check("release_load_max_seconds", rm.get("rounds") == 1 and stopped and
          all(s["requests"] == 2 for c in rm.get("configs", []) for s in c.get("load", [])),
          f"exit {p.returncode}, rounds in the report: {rm.get('rounds')} (1 of 2 asked), the "
          f"stop logged: {stopped}")

    refusals = []
    for extra, want in ((["--load", "0"], "at least one rate"),
                        (["--load", "1", "--prompt-dist", "5"], "lo:hi"),
                        (["--load", "1", "--prompt-dist", "1:4"], "at least 2 tokens"),
                        (["--load", "1", "--prompt-dist", "8:4000"], "serve.max_context"),
                        (["--concurrency", "0"], "at least one number"),
                        (["--a-bin", "/nonexistent"], "not an executable"),
                        (["--b-label", "A"], "different labels"),
                        (["--temperature", "-1"], "cannot be negative")):
        q = subprocess.run([sys.executable, os.path.join(ROOT, "release", "bench.py"), "-c",
                            os.path.join(ROOT, "conf", "demo.ini"), "--a-bin", binary,
                            "--b-bin", binary, "--out", out] + extra,
                           capture_output=True, text=True, timeout=60)
        refusals.append(q.returncode == 2 and want in q.stderr)
    check("release_driver_refuses", all(refusals),
          f"--load 0, a prompt distribution without ':', one under 2 tokens, one past "
          f"serve.max_context, --concurrency 0, a missing binary, equal labels, a negative "
          f"temperature: exit 2 with the cause: {refusals}")


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
