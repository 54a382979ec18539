#!/usr/bin/env python3
"""The process's edges, through build/g4pipe on the bundled tiny model (CPU backend):

  signal_drains        SIGTERM while 4 requests run and 2 wait: the waiting ones end
                       cancelled, the running ones finish, exit status 143 (128 + 15)
  second_signal        two SIGTERMs: the running requests end cancelled at once, exit 143
  closed_stdout        the reader closes the pipe after one line: a logged write error and a
                       non-zero exit, not a silent death by SIGPIPE
  full_stdout          stdout on /dev/full: a logged write error, exit status 1
  stdin_read_error     stdin a directory: the read error is logged, exit status 1
  prefill_progress     a prompt of several prefill slices reports on stderr when it is in; a
                       one-slice prompt does not; both are answered

Every request line gets exactly one terminal line (done or error) wherever the run reaches it.
"""
import json
import os
import signal
import subprocess
import sys
import time

BUILD = os.environ.get("BUILD_DIR", "build")
BIN = os.path.join(BUILD, "g4pipe")
CONF = "conf/demo.ini"


def report(ok, gate, msg):
    print(f"{'PASS' if ok else 'FAIL'} {gate}: {msg}")
    return ok


def req(i, max_tokens):
    return json.dumps({"id": f"r{i}", "tokens": [2, 10 + i, 20 + i], "max_tokens": max_tokens,
                       "ignore_eos": True}) + "\n"


def start(stdin=subprocess.PIPE, stdout=subprocess.PIPE):
    return subprocess.Popen([BIN, "-c", CONF], stdin=stdin, stdout=stdout,
                            stderr=subprocess.PIPE, text=True)


def terminal_lines(lines):
    ends = {}
    for d in lines:
        if d.get("event") in ("done", "error"):
            ends.setdefault(d["id"], []).append(d)
    return ends


def read_until_tokens(p, ids, lines, timeout=60):
    """Reads answer lines until every id in ids has a token line."""
    seen, t0 = set(), time.time()
    while seen != ids and time.time() - t0 < timeout:
        line = p.stdout.readline()
        if not line:
            break
        d = json.loads(line)
        lines.append(d)
        if d.get("event") == "token":
            seen.add(d["id"])
    return seen == ids


def signal_case(gate, n_signals, max_tokens):
    p = start()
    for i in range(6):  # demo.ini: max_batch 4, so r4 and r5 wait
        p.stdin.write(req(i, max_tokens))
    p.stdin.flush()
    lines = []
    running = {f"r{i}" for i in range(4)}
    if not read_until_tokens(p, running, lines):
        p.kill()
        return report(False, gate, "the 4 requests never all started")
    for _ in range(n_signals):
        p.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        return report(False, gate, "g4pipe did not exit within 120 s of the signal")
    lines += [json.loads(x) for x in out.splitlines() if x.strip()]
    ends = terminal_lines(lines)
    once = all(len(ends.get(f"r{i}", [])) == 1 for i in range(6))
    reason = {i: ends[i][0].get("finish_reason") for i in ends if len(ends[i]) == 1}
    queued_cancelled = reason.get("r4") == "cancelled" and reason.get("r5") == "cancelled"
    want_running = "cancelled" if n_signals > 1 else "length"
    running_ok = all(reason.get(i) == want_running for i in running)
    return report(once and queued_cancelled and running_ok and p.returncode == 143, gate,
                  f"{n_signals} SIGTERM: exit {p.returncode} (want 143), one terminal line per "
                  f"request: {once}, queued cancelled: {queued_cancelled}, running "
                  f"{want_running}: {running_ok} ({reason})")


def closed_stdout():
    r, w = os.pipe()
    p = start(stdout=w)
    os.close(w)
    for i in range(4):
        p.stdin.write(req(i, 1500))
    p.stdin.close()
    with os.fdopen(r) as f:
        first = f.readline()
    try:  # the read end is closed now
        p.wait(timeout=120)
        err = p.stderr.read()
    except subprocess.TimeoutExpired:
        p.kill()
        return report(False, "closed_stdout", "g4pipe kept running with its stdout closed")
    logged = "writing an answer to stdout failed" in err
    return report(p.returncode == 1 and logged and first.startswith("{"), "closed_stdout",
                  f"exit {p.returncode} (want 1, not death by SIGPIPE), logged: {logged}")


def full_stdout():
    with open("/dev/full", "w") as full:
        p = start(stdout=full)
        _, err = p.communicate(req(0, 5) + req(1, 5), timeout=120)
    logged = "writing an answer to stdout failed" in err
    return report(p.returncode == 1 and logged, "full_stdout",
                  f"stdout /dev/full: exit {p.returncode} (want 1), logged: {logged}")


def stdin_read_error():
    fd = os.open("/", os.O_RDONLY)
    p = start(stdin=fd)
    os.close(fd)
    out, err = p.communicate(timeout=120)
    logged = "reading stdin failed" in err
    return report(p.returncode == 1 and logged and out == "", "stdin_read_error",
                  f"stdin a directory: exit {p.returncode} (want 1), logged: {logged}")


def prefill_progress():
    toks = [2] + [1000 + i for i in range(298)]  # 299 tokens: 5 slices of 64
    lines = (json.dumps({"id": "long", "tokens": toks, "max_tokens": 1}) + "\n" +
             json.dumps({"id": "short", "tokens": [2, 5, 6], "max_tokens": 1}) + "\n")
    p = subprocess.run([BIN, "-c", CONF, "--set", "serve.prefill_chunk=64"], input=lines,
                       capture_output=True, text=True, timeout=300)
    done = {d["id"] for d in map(json.loads, p.stdout.splitlines()) if d.get("event") == "done"}
    long_logged = 'request "long": prompt of 299 tokens prefilled in' in p.stderr
    short_logged = 'request "short": prompt' in p.stderr
    return report(p.returncode == 0 and done == {"long", "short"} and long_logged and
                  not short_logged, "prefill_progress",
                  f"exit {p.returncode}, answered {sorted(done)}, long prompt logged: "
                  f"{long_logged}, one-slice prompt logged: {short_logged}")


def main():
    if not os.path.exists(BIN):
        print(f"FAIL process_edges: no {BIN}")
        return 1
    results = [signal_case("signal_drains", 1, 300), signal_case("second_signal", 2, 1900),
               closed_stdout(), full_stdout(), stdin_read_error(), prefill_progress()]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
