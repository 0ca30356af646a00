#!/usr/bin/env python3
"""What tracing costs the LLM job's decode step: meshnn-llm on its default (TinyLlama shapes, tp on
1x2, 2 ranks) without tracing and with --trace, alternating over rounds so that the machine's drift
falls on both alike; optionally a baseline binary built without the tracing code, for the cost of
tracing when it is off. Prints each run's decode ms/step and the medians' ratios.

    scripts/trace_overhead.py [--rounds 3] [--new-tokens 32] [--baseline OLD/meshnn-llm] [--build build]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decode_ms(binary, extra, new_tokens, work):
    record = os.path.join(work, "run.json")
    cmd = [os.path.join(ROOT, "scripts", "mpirun.sh"), "-np", "2", binary, "--mesh", "1x2", "--mode", "tp",
           "--max-new-tokens", str(new_tokens), "--ignore-eos", "--json", record, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return json.load(open(record))["decode_ms_per_step"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--baseline", help="a meshnn-llm built before tracing existed")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    binary = os.path.join(a.build, "apps", "meshnn-llm")
    with tempfile.TemporaryDirectory() as work:
        trace = os.path.join(work, "trace.json")
        variants = [("off", binary, []), ("on", binary, ["--trace", trace])]
        if a.baseline:
            variants.insert(0, ("baseline", a.baseline, []))
        results = {name: [] for name, _, _ in variants}
        for round_ in range(a.rounds):
            for name, b, extra in variants:
                ms = decode_ms(b, extra, a.new_tokens, work)
                results[name].append(ms)
                print(f"round {round_ + 1}: {name:8s} {ms:8.2f} ms/step", flush=True)
        med = {name: statistics.median(v) for name, v in results.items()}
        print("median ms/step: " + ", ".join(f"{n} {m:.2f}" for n, m in med.items()))
        print(f"tracing on / off: {med['on'] / med['off']:.3f}")
        if a.baseline:
            print(f"tracing off / baseline: {med['off'] / med['baseline']:.3f}")
        if os.path.exists(trace):
            print(f"trace of the last 'on' run: {os.path.getsize(trace) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
