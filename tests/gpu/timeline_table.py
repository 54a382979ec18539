#!/usr/bin/env python3
"""tests/gpu/timeline_table.py - ncu's CSV of one decode step (tests/gpu/box_timeline.sh) as a
markdown table: per kernel name, the launches, the summed duration, the DRAM bytes read and written
and the rate they moved at, slowest first; then the step's kernels in launch order with the same
figures. A reading aid for docs/perf-notes.md, not a test. Standard library only (the GPU box
installs nothing).

  timeline_table.py ncu.csv [--order N]    (N: how many launches of the order list to print)"""
import csv
import re
import sys

SCALE = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
         "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1.0, "ns": 1e-9, "us": 1e-6, "ms": 1e-3}


def short(name):
    """The kernel's own name: no return type, template arguments or parameter list."""
    name = re.sub(r"\(.*$", "", name)
    depth, out = 0, []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    words = "".join(out).split()
    return words[-1] if words else name


def read(path):
    kernels = {}  # ID -> {name, grid, block, t, rd, wr}
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own log lines are not CSV
    for row in csv.DictReader(lines):
        try:
            kid = int(row["ID"])
        except (KeyError, ValueError):
            continue
        k = kernels.setdefault(kid, {"name": short(row["Kernel Name"]), "grid": row.get("Grid Size", ""),
                                     "block": row.get("Block Size", ""), "t": 0.0, "rd": 0.0, "wr": 0.0})
        v = float(row["Metric Value"].replace(",", "") or 0) * SCALE.get(row["Metric Unit"], 1.0)
        metric = row["Metric Name"]
        if metric.startswith("gpu__time_duration"):
            k["t"] = v
        elif metric.startswith("dram__bytes_read"):
            k["rd"] = v
        elif metric.startswith("dram__bytes_write"):
            k["wr"] = v
    return [kernels[i] for i in sorted(kernels)]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    order_n = int(sys.argv[sys.argv.index("--order") + 1]) if "--order" in sys.argv else 80
    ks = read(sys.argv[1])
    if not ks:
        sys.exit(f"timeline_table: no kernel rows in {sys.argv[1]}")
    total_t = sum(k["t"] for k in ks)
    total_b = sum(k["rd"] + k["wr"] for k in ks)
    print(f"{len(ks)} kernels, {total_t * 1e3:.3f} ms of kernel time (no launch gaps: ncu runs "
          f"them one at a time), {total_b / 1e9:.3f} GB of DRAM traffic\n")
    groups = {}
    for k in ks:
        g = groups.setdefault(k["name"], {"n": 0, "t": 0.0, "b": 0.0})
        g["n"] += 1
        g["t"] += k["t"]
        g["b"] += k["rd"] + k["wr"]
    print("| kernel | launches | ms | share | mean us | GB | GB/s |")
    print("|---|---|---|---|---|---|---|")
    for name, g in sorted(groups.items(), key=lambda x: -x[1]["t"]):
        rate = g["b"] / g["t"] / 1e9 if g["t"] else 0
        print(f"| {name} | {g['n']} | {g['t'] * 1e3:.3f} | {100 * g['t'] / total_t:.1f}% | "
              f"{g['t'] / g['n'] * 1e6:.2f} | {g['b'] / 1e9:.4f} | {rate:.0f} |")
    print(f"\nlaunch order, first {order_n}:\n")
    print("| # | kernel | grid | block | us | MB | GB/s |")
    print("|---|---|---|---|---|---|---|")
    for i, k in enumerate(ks[:order_n]):
        b = k["rd"] + k["wr"]
        rate = b / k["t"] / 1e9 if k["t"] else 0
        print(f"| {i} | {k['name']} | {k['grid']} | {k['block']} | {k['t'] * 1e6:.2f} | "
              f"{b / 1e6:.2f} | {rate:.0f} |")


if __name__ == "__main__":
    main()
