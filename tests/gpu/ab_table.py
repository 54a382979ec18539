#!/usr/bin/env python3
"""tests/gpu/ab_table.py - a plan's A/B log (bench_decode runs under "== setting" headers, as
tests/gpu/plans/next-session.sh's `ab` step prints them) as a markdown table: per setting, in the
order the log first names it, each run's graphed decode step median, its breakdown's attention,
experts and projection rows (the first breakdown it prints; q|k|v and gate|up are one step each
where the schedule groups them) and its prefill wall time, one column a run,
so that the rounds of a paired A/B read side by side. A reading aid for docs/perf-notes.md, not a test. Standard library only (the GPU
box installs nothing).

  ab_table.py LOG [--self-test]

A header's round words (", round N" at its end) are dropped, so a setting's rounds share a row;
"-- round N" lines between headers only separate them."""
import re
import sys

HEADER = re.compile(r"^== (.*?)(?:, round \d+)?\s*$")
DECODE = re.compile(r"^decode step: median ([0-9.]+) ms")
PREFILL = re.compile(r"^prefill: .* in ([0-9.]+) ms")
# the breakdown's rows ("attention   2.010   15.1%  ..."): the step's name, then its ms; the
# steps read, each with the short name render gives it, in render's order
STEP_NAMES = (("attention", "attn"), ("experts", "experts"), ("q_proj+k_proj+v_proj", "qkv"),
              ("o_proj", "o"), ("gate_proj+up_proj", "gate|up"), ("down_proj", "down"))
STEP = re.compile(r"^(" + "|".join(re.escape(k) for k, _ in STEP_NAMES) + r")\s+([0-9.]+)\s")


def parse(lines):
    """{setting: [run, ...]} in first-seen order, a run {"decode", "attention", "prefill"}."""
    table, order, current, run = {}, [], None, None
    for line in lines:
        line = line.rstrip("\n")
        m = HEADER.match(line)
        if m:
            current = m.group(1).strip()
            if current not in table:
                table[current] = []
                order.append(current)
            run = {}
            table[current].append(run)
            continue
        if run is None:
            continue
        for key, pat in (("decode", DECODE), ("prefill", PREFILL)):
            m = pat.match(line)
            if m and key not in run:
                run[key] = float(m.group(1))
        m = STEP.match(line)
        if m and m.group(1) not in run:  # the first breakdown's: a prefill run prints one
            run[m.group(1)] = float(m.group(2))
    return [(s, table[s]) for s in order]


def render(rows):
    """The markdown table; a run's missing figure is "-" (it failed, or printed none)."""
    width = max((len(runs) for _, runs in rows), default=0)
    out = ["| setting | " + " | ".join(f"run {i + 1}" for i in range(width)) + " |",
           "|---|" + "---|" * width]
    for setting, runs in rows:
        cells = []
        for r in runs:
            parts = []
            if "decode" in r:
                parts.append(f"{r['decode']:.3f}")
            parts += [f"{short} {r[key]:.3f}" for key, short in STEP_NAMES if key in r]
            if "prefill" in r:
                parts.append(f"prefill {r['prefill']:.1f}")
            cells.append(", ".join(parts) if parts else "-")
        cells += [""] * (width - len(runs))
        out.append(f"| {setting} | " + " | ".join(cells) + " |")
    return "\n".join(out)


SAMPLE = """-- round 1
== gemma4-26b-a4b, 16 rows, bf16 pool, attn_early_lookup 0
decode step: median 13.271 ms, p90 13.300 ms, min 13.200 ms (1205.6 tok/s at batch 16)
attention                                       2.010     15.1%       60      3.700     1840.0
q_proj+k_proj+v_proj                            0.512      3.9%       30      1.200     2343.8
== gemma4-26b-a4b, 16 rows, bf16 pool, attn_early_lookup 1
decode step: median 12.900 ms, p90 12.950 ms, min 12.800 ms (1240.3 tok/s at batch 16)
-- round 2
== gemma4-26b-a4b, 16 rows, bf16 pool, attn_early_lookup 0
decode step: median 13.268 ms, p90 13.290 ms, min 13.210 ms (1205.9 tok/s at batch 16)
== gemma4-26b-a4b, one 1,024-token prompt, moe_prefill_tiles 2, round 1
prefill: 1024 tokens x 1 sequences in 86.6 ms
== gemma4-26b-a4b, one 1,024-token prompt, moe_prefill_tiles 2, round 2
prefill: 1024 tokens x 1 sequences in 86.4 ms
experts                                        34.530     39.9%       30     45.600     1320.6
"""


def self_test():
    rows = parse(SAMPLE.splitlines())
    want = [("gemma4-26b-a4b, 16 rows, bf16 pool, attn_early_lookup 0",
             [{"decode": 13.271, "attention": 2.010, "q_proj+k_proj+v_proj": 0.512},
              {"decode": 13.268}]),
            ("gemma4-26b-a4b, 16 rows, bf16 pool, attn_early_lookup 1", [{"decode": 12.9}]),
            ("gemma4-26b-a4b, one 1,024-token prompt, moe_prefill_tiles 2",
             [{"prefill": 86.6}, {"prefill": 86.4, "experts": 34.53}])]
    ok = rows == want
    table = render(rows)
    ok = ok and "| 13.271, attn 2.010, qkv 0.512 | 13.268 |" in table and "prefill 86.4" in table
    print(("PASS" if ok else "FAIL") + " ab_table_self_test: a sample log of 3 settings and 5 "
          "runs " + ("parsed and rendered as written" if ok else "read wrongly (below)"))
    if not ok:
        print(rows)
        print(table)
    return 0 if ok else 1


def main(argv):
    if "--self-test" in argv:
        return self_test()
    if len(argv) != 2:
        print("usage: ab_table.py LOG [--self-test]", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        print(render(parse(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
