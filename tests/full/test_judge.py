#!/usr/bin/env python3
"""tests/full/test_judge.py - the full step's rule (full_step.judge) on hand-made steps, on the
CPU: a sure flip fails, a flip inside HF's own noise is permitted and ends the comparison, a gap
past twice the floor fails, a short or errored answer fails. Prints PASS/FAIL lines
(tests/harness.h's format); exits 1 on any FAIL."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from full_step import judge, rule_floors, splitk_parts, GREEDY  # noqa: E402

failures = 0


def check(gate, ok, msg):
    global failures
    print(f"{'PASS' if ok else 'FAIL'} {gate}: {msg}", flush=True)
    failures += not ok


def ref_step(token, other, margin, lp=-0.5, sdpa_shift=0.0, sdpa_token=None):
    """HF eager's step (token over other by margin nats) and sdpa's, each id moved by sdpa_shift."""
    top = [[token, lp], [other, lp - margin], [7, lp - margin - 1], [8, lp - margin - 2],
           [9, lp - margin - 3]]
    eager = {"token": token, "top1": 10.0, "top2": 10.0 - margin, "top": top}
    sdpa = {"token": token if sdpa_token is None else sdpa_token,
            "at": [[i, v + (sdpa_shift if k % 2 else -sdpa_shift)] for k, (i, v) in enumerate(top)]}
    return eager, sdpa


def case(margins, shifts, engine_tokens=None, engine_shift=0.0, sdpa_tokens=None, end="done"):
    ref, floor, ans = [], [], {"tokens": [], "lps": [], "end": {"event": end}}
    for s, (m, f) in enumerate(zip(margins, shifts)):
        e, d = ref_step(100 + s, 200 + s, m, sdpa_shift=f,
                        sdpa_token=None if sdpa_tokens is None else sdpa_tokens[s])
        ref.append(e)
        floor.append(d)
        tok = e["token"] if engine_tokens is None else engine_tokens[s]
        ans["tokens"].append(tok)
        ans["lps"].append({i: v + engine_shift for i, v in e["top"]})
    return ref, [floor], ans


print("PLAN 15", flush=True)  # tests/harness.h: the gate lines below, all of them
n = GREEDY
ok, compared, equal, gap, lim, why = judge(*case([3.0] * n, [0.2] * n))
check("full_judge_exact", ok and compared == n and equal == n and gap == 0,
      f"the engine equal to HF: ok {ok}, {equal} of {compared} equal, gap {gap}")

toks = [100 + s for s in range(n)]
toks[3] = 203
ok, compared, equal, gap, lim, why = judge(*case([3.0] * n, [0.2] * n, engine_tokens=toks))
check("full_judge_sure_flip_fails", not ok and compared == 4 and "step 3" in why,
      f"a flip at margin 3.0 over a floor gap of 0.2 fails: ok {ok}, {why}")

ok, compared, equal, gap, lim, why = judge(*case([3.0] * n, [1.6] * n, engine_tokens=toks))
check("full_judge_noise_flip_permitted", ok and compared == 4 and equal == 3 and "permitted" in why,
      f"a flip at margin 3.0 under 2 x a floor gap of 1.6 is permitted and ends the comparison: "
      f"ok {ok}, {equal} of {compared}, {why}")

sd = [100 + s for s in range(n)]
sd[3] = 203
ok, compared, equal, gap, lim, why = judge(*case([3.0] * n, [0.2] * n, engine_tokens=toks,
                                                 sdpa_tokens=sd))
check("full_judge_sdpa_flip_permitted", ok and compared == 4,
      f"a flip where sdpa's own pick differs is permitted: ok {ok}, {why}")

ok, compared, equal, gap, lim, why = judge(*case([0.3] * n, [0.0] * n, engine_tokens=toks))
check("full_judge_margin_cut", ok and compared == 4,
      f"a flip under the 0.5-nat margin cut is permitted: ok {ok}, {why}")

ok, compared, equal, gap, lim, why = judge(*case([3.0] * n, [0.2] * n, engine_shift=0.5))
check("full_judge_gap_fails", not ok and abs(gap - 0.5) < 1e-9 and abs(lim - 0.4) < 1e-9,
      f"a gap of 0.5 past 2 x a floor of 0.2 fails: ok {ok}, gap {gap:.3f}, limit {lim:.3f}")

ok, compared, equal, gap, lim, why = judge(*case([3.0] * n, [0.2] * n, engine_shift=0.35))
check("full_judge_gap_within", ok and abs(gap - 0.35) < 1e-9,
      f"a gap of 0.35 within 2 x a floor of 0.2 passes: ok {ok}, gap {gap:.3f}")

ref, floor, ans = case([3.0] * n, [0.2] * n, engine_shift=0.1)
ans["lps"][2][7] += 0.3  # step 2's largest move: HF's third id, 0.4 off
detail = []
judge(ref, floor, ans, detail)
check("full_judge_detail", len(detail) == n and "gap 0.4000 at id 7 (HF rank 2" in detail[2]
      and "gap 0.1000" in detail[3] and "floor gap 0.2000" in detail[3],
      f"one line a compared step, naming where its gap lies: {len(detail)} lines, step 2: "
      f"{detail[2] if len(detail) > 2 else None}")

ref, floor, ans = case([3.0] * n, [0.2] * n)
del ans["tokens"][5:], ans["lps"][5:]
ok, compared, equal, gap, lim, why = judge(ref, floor, ans)
check("full_judge_short_answer_fails", not ok and "5 tokens" in why, f"ok {ok}, {why}")

ok, compared, equal, gap, lim, why = judge(*case([3.0] * n, [0.2] * n, end="error"))
check("full_judge_error_fails", not ok and "no done line" in why, f"ok {ok}, {why}")

ref, floor, ans = case([3.0] * n, [0.2] * n)
ans["lps"][0] = {100: -0.5, 999: -5.0}  # HF's second id (-3.5) past the engine's list, which ends at -5
ok, compared, equal, gap, lim, why = judge(ref, floor, ans)
check("full_judge_unlisted_id", not ok and gap > lim,
      f"an HF id missing from the engine's list counts from the engine's lowest value: ok {ok}, "
      f"gap {gap:.3f}, limit {lim:.3f}")

# a second floor (HF eager on cuBLASLt): its larger moves widen the limit, and its own flip
# permits the engine's
ref, floors, ans = case([3.0] * n, [0.1] * n, engine_shift=0.35)
_, lt, _ = case([3.0] * n, [0.2] * n)
ok1, _, _, gap1, lim1, _ = judge(ref, floors, ans)
ok2, _, _, gap2, lim2, _ = judge(ref, floors + lt, ans)
check("full_judge_second_floor_limit", not ok1 and ok2 and abs(lim2 - 0.4) < 1e-9,
      f"a gap of 0.35: over sdpa's limit {lim1:.3f} alone, within {lim2:.3f} with a second floor "
      f"of 0.2")
ref, floors, ans = case([3.0] * n, [0.2] * n, engine_tokens=toks)
_, lt, _ = case([3.0] * n, [0.2] * n, sdpa_tokens=sd)
ok1, _, _, _, _, why1 = judge(ref, floors, ans)
ok2, compared, _, _, _, why2 = judge(ref, floors + lt, ans)
check("full_judge_second_floor_flip", not ok1 and ok2 and compared == 4 and "permitted" in why2,
      f"a flip sdpa does not make fails ({why1}); where the second floor makes it, it is "
      f"permitted ({why2})")

# diagnostic GEMM orders (make --floors splitk8 ...) are printed but never join the rule: a wide
# one must not loosen the limit
run = {"eager": "E", "sdpa": "S", "batch2": "B", "splitk": "K2", "splitk4": "K4", "splitk8": "K8",
       "splitk3": "K3"}
got = rule_floors(run)
check("full_rule_floors_exclude_diagnostic", got == ["S", "B", "K2", "K4"],
      f"the rule's members of a run with splitk3 and splitk8 beside FLOORS: {got}")
# the experts' member (MoE references) joins the rule; a reference without it is judged on the rest
got = rule_floors(dict(run, experts="X"))
check("full_rule_floors_experts_member", got == ["S", "B", "K2", "K4", "X"],
      f"the rule's members of a MoE run with the eager-experts floor: {got}")
parsed = {k: splitk_parts(k) for k in ("splitk", "splitk3", "splitk16", "splitk17", "splitk1",
                                       "splitkx", "sdpa")}
check("full_splitk_keys", parsed == {"splitk": 2, "splitk3": 3, "splitk16": 16, "splitk17": None,
                                     "splitk1": None, "splitkx": None, "sdpa": None},
      f"split-K floor keys to parts of k: {parsed}")

sys.exit(1 if failures else 0)
