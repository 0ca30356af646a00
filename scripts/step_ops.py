#!/usr/bin/env python3
"""Where a decode step's time goes: from a trace of the LLM job (--trace FILE), the mean time per
decode step of each op on one rank's main thread, and the mean step.

  scripts/step_ops.py TRACE.json [--rank 0] [--skip 5]

--skip drops the first decode steps (caches and pages still warming). Ops nested in other ops
count in both; the matmuls' worker threads are not counted (their time is inside the op's).
"""
import argparse
import collections
import json


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--rank", type=int, default=0, help="the rank (trace pid) to read")
    p.add_argument("--skip", type=int, default=5, help="decode steps to leave out at the start")
    a = p.parse_args()
    with open(a.trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    spans = [e for e in events if e.get("ph") == "X" and e.get("pid") == a.rank]
    steps = sorted((e for e in spans if e["name"].startswith("decode step")), key=lambda e: e["ts"])[a.skip:]
    if not steps:
        raise SystemExit(f"no decode steps of rank {a.rank} after skipping {a.skip} in {a.trace}")
    thread = steps[0]["tid"]
    ops = sorted((e for e in spans if e["tid"] == thread and not e["name"].startswith("decode step")),
                 key=lambda e: e["ts"])
    total = collections.defaultdict(float)
    calls = collections.Counter()
    i = 0
    for step in steps:
        begin, end = step["ts"], step["ts"] + step["dur"]
        while i < len(ops) and ops[i]["ts"] < begin:
            i += 1
        j = i
        while j < len(ops) and ops[j]["ts"] + ops[j]["dur"] <= end:
            total[ops[j]["name"]] += ops[j]["dur"]
            calls[ops[j]["name"]] += 1
            j += 1
    n = len(steps)
    step_us = sum(s["dur"] for s in steps) / n
    print(f"{n} decode steps of rank {a.rank}: {step_us / 1000:.3f} ms per step")
    print(f"{'op':<32} {'ms/step':>9} {'calls/step':>11} {'share':>7}")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{name:<32} {us / n / 1000:>9.3f} {calls[name] / n:>11.1f} {100 * us / n / step_us:>6.1f}%")


if __name__ == "__main__":
    main()
