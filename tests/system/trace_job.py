#!/usr/bin/env python3
"""The LLM job traced and profiled on 2 ranks (tp on 1x2), checked through its files.

    trace_job.py BUILD_DIR WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]

The trace is one Chrome trace-event JSON file: both ranks' processes and main threads named; the
phases (load weights, one prefill pass, one event per decode step), the ops with shapes and the
matmuls' FLOPs, every all_reduce with its members, and its transfers as async spans naming the
peer. The ranks' clocks are aligned: each all_reduce of rank 0 overlaps the same all_reduce of rank 1
(neither can finish before the other has sent), and rank 1's receive of a message ends after rank
0's send of it began. The profile CSV holds both ranks' rows. A trace file that cannot be written
fails the job with one message; without --trace nothing is written.
"""
import csv
import json
import os
import shutil
import subprocess
import sys

BUILD, WORK, MPIEXEC = sys.argv[1], sys.argv[2], sys.argv[3:]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def llm(*args, ranks=2):
    cmd = [*MPIEXEC, "-n", str(ranks), os.path.join(BUILD, "apps", "meshnn-llm"), "--weights",
           os.path.join(WORK, "tiny.h5"), "--prompt-len", "40", "--batch", "2", "--max-new-tokens", "5",
           "--ignore-eos", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    subprocess.run([os.path.join(BUILD, "apps", "meshnn-make-weights"), "--model", "llama", "--preset", "tiny",
                    "--output", os.path.join(WORK, "tiny.h5")], check=True, capture_output=True)
    trace_file, csv_file = os.path.join(WORK, "trace.json"), os.path.join(WORK, "profile.csv")
    r = llm("--trace", trace_file, "--profile-csv", csv_file)
    check(r.returncode == 0, "meshnn-llm --trace --profile-csv runs")
    if r.returncode != 0:
        print(r.stdout[-3000:] + r.stderr[-3000:])
        return
    check(r.stdout.count("profile of rank 0") == 1 and "all_reduce" in r.stdout, "rank 0 prints the profile once")

    events = json.load(open(trace_file))["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    check({e["args"]["name"] for e in meta if e["name"] == "process_name"} == {"rank 0", "rank 1"},
          "both ranks are processes of the trace")
    offsets = [e["args"]["clock_offset_ns"] for e in meta if e["name"] == "process_name"]
    check(all(abs(o) < 1_000_000 for o in offsets), f"clock offsets on one host are below 1 ms ({offsets})")
    check(all(any(e["name"] == "thread_name" and e["pid"] == p and e["args"]["name"] == "main" for e in meta)
              for p in (0, 1)), "each rank's main thread is named")

    def spans(pid, name, ph="X"):
        return [e for e in events if e["pid"] == pid and e["name"] == name and e["ph"] == ph]

    for pid in (0, 1):
        check(len(spans(pid, "load weights")) == 1 and len(spans(pid, "prefill pass")) >= 1,
              f"rank {pid}: load and prefill phases")
        steps = spans(pid, "decode step")
        check(len(steps) == 4, f"rank {pid}: one event per decode step (4 steps after the first token, got {len(steps)})")
        mm = spans(pid, "matmul")
        check(mm and all(e["args"]["flops"] > 0 and "m" in e["args"] and "path" in e["args"] for e in mm),
              f"rank {pid}: matmuls carry shapes, kernel path and FLOPs")
        check(len(spans(pid, "warm-up")) == 1, f"rank {pid}: one warm-up phase before the requests")
        passes = spans(pid, "decode step") + spans(pid, "prefill pass") + spans(pid, "warm-up")
        check(all(any(s["ts"] <= e["ts"] <= s["ts"] + s["dur"] for s in passes)
                  for e in spans(pid, "attention_with_kv_cache")), f"rank {pid}: attention runs inside the passes")
        ar = spans(pid, "all_reduce")
        check(ar and all(e["args"]["members"] == 2 for e in ar), f"rank {pid}: all_reduces with their members")
        sends = spans(pid, "send", "b")
        check(sends and all(s["args"]["peer_rank"] == 1 - pid and s["args"]["bytes"] > 0 for s in sends),
              f"rank {pid}: transfers name their peer's rank and their size")

    a0, a1 = spans(0, "all_reduce"), spans(1, "all_reduce")
    check(len(a0) == len(a1) and all(x["ts"] <= y["ts"] + y["dur"] and y["ts"] <= x["ts"] + x["dur"]
                                     for x, y in zip(a0, a1)),
          "each all_reduce of rank 0 overlaps the same one of rank 1 on the aligned clocks")
    ends = {e["id"]: e["ts"] for e in events if e["ph"] == "e"}
    s0 = spans(0, "send", "b")
    r1 = spans(1, "recv", "b")
    check(len(s0) == len(r1) and all(ends[r["id"]] >= s["ts"] - 1.0 for s, r in zip(s0, r1)),
          "rank 1's k-th receive ends after rank 0's k-th send began")

    rows = list(csv.DictReader(open(csv_file)))
    check({row["rank"] for row in rows} == {"0", "1"} and any(row["name"] == "matmul" for row in rows),
          "the profile CSV holds both ranks' rows")

    r = llm("--trace", "/nonexistent-dir/trace.json")
    check(r.returncode == 1 and r.stderr.count("cannot write the trace to '/nonexistent-dir/trace.json'") == 1,
          "an unwritable trace file fails the job with one message")
    before = set(os.listdir(WORK))
    r = llm()
    check(r.returncode == 0 and set(os.listdir(WORK)) == before and "profile of rank" not in r.stdout,
          "without --trace nothing is recorded or written")


main()
print(f"{len(failures)} failure(s)")
for f in failures:
    print("  " + f)
sys.exit(1 if failures else 0)
