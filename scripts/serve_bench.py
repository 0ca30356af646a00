#!/usr/bin/env python3
"""meshnn-llm --serve under load against the batch job on the same requests, same run.

    scripts/serve_bench.py [--ranks 2] [--preset tinyllama] [--requests 16] [--concurrency 8]
                           [--prompt-len 128] [--new-tokens 64] [--rounds 3] [--act-dtype bfloat16] [--mode tp]
                           [--logprobs N] [--build build] [--json FILE]

The model is meshnn-llm's generated --preset model (no download). --requests prompts of
--prompt-len random token ids each ask for --new-tokens tokens (--ignore-eos, greedy).

- The peer: the batch job (--tokens, --max-batch = --concurrency) on the same prompts; its figure
  is its generation time (load and warm-up excluded) from its --json record.
- The server (--max-batch = --concurrency) with --concurrency clients in a closed loop: each sends
  its next request, streamed, as soon as its last one ends, so both sides hold the same number of
  requests at once. Its figure is the time from the first request sent to the last token received,
  as the clients see it (HTTP, JSON and the text stream included).

The two alternate for --rounds rounds (this machine's decode speed moves from run to run by a
third, whichever job runs). Prints per round both throughputs and their ratio, the clients' time to
first token (median, 95th percentile) and time between tokens, and the server's own account of
its busy time: how much of it went to the passes (forward and sampling) and how much to the rest
of the server (taking requests, telling the other ranks, handing tokens to the HTTP threads).
Also counts the answers equal to the batch job's tokens: with bfloat16 activations (the default)
some differ where two tokens are nearly tied, since the passes' shapes differ (README, "The LLM
job"); --act-dtype float32 makes them all equal. --logprobs N has every request ask for its tokens'
log-probabilities with N alternatives (the batch job computes none): the ratio then shows what
they cost.
"""
import re
import argparse
import http.client
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def llm_command(args, *extra):
    return [os.path.join(ROOT, "scripts", "mpirun.sh"), "-np", str(args.ranks),
            os.path.join(args.build, "apps", "meshnn-llm"), "--preset", args.preset, "--ignore-eos",
            "--max-batch", str(args.concurrency // args.replicas), "--act-dtype", args.act_dtype, "--mode", args.mode,
            *extra]


def batch_job(args, prompts, work):
    tokens, record = os.path.join(work, "prompts.h5"), os.path.join(work, "batch.json")
    out = os.path.join(work, "batch.h5")
    with h5py.File(tokens, "w") as f:
        f["tokens"] = np.array(prompts, dtype=np.int32)
        f["max_new_tokens"] = np.full(len(prompts), args.new_tokens, dtype=np.int32)
    r = subprocess.run(llm_command(args, "--tokens", tokens, "--json", record, "--output", out, "--no-stream"),
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"the batch job failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    with open(record) as f:
        figures = json.load(f)
    with h5py.File(out) as f:
        answers = [[int(t) for t in row if t >= 0] for row in f["tokens"][...]]
    return figures, answers


def one_request(port, prompt, new_tokens, logprobs=None):
    """A streamed request: (seconds to the first token, seconds between later tokens, end, ids).
    With logprobs, each token's log-probability and that many alternatives come too."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    body = {"prompt": prompt, "max_tokens": new_tokens, "stream": True, "return_token_ids": True}
    if logprobs is not None:
        body["logprobs"] = logprobs
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    ids, arrivals = [], []
    for line in response:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            new = choice.get("token_ids", [])
            ids += new
            arrivals += [time.perf_counter()] * len(new)
    conn.close()
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return start, arrivals[0] - start if arrivals else float("nan"), gaps, time.perf_counter(), ids


def serve_run(args, prompts, work):
    port_file = os.path.join(work, "port")
    if os.path.exists(port_file):
        os.remove(port_file)  # the last round's
    log = open(os.path.join(work, "server.log"), "w+")
    server = subprocess.Popen(llm_command(args, "--serve", "--port", "0", "--port-file", port_file, "--max-context",
                                          str(args.prompt_len + args.new_tokens)), stdout=log, stderr=subprocess.STDOUT)
    try:
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if server.poll() is not None:
                log.seek(0)
                sys.exit(f"the server failed:\n{log.read()[-3000:]}")
            time.sleep(0.2)
        port = int(open(port_file).read())
        todo = queue.Queue()
        for i, p in enumerate(prompts):
            todo.put((i, p))
        results, errors = [None] * len(prompts), []

        def client():
            while True:
                try:
                    i, p = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[i] = one_request(port, p, args.new_tokens, args.logprobs)
                except Exception as e:  # reported below: a request the server failed is a finding
                    errors.append(f"request {i}: {e!r}")

        threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            sys.exit("requests failed:\n" + "\n".join(errors))
    finally:
        server.terminate()  # mpirun forwards it; the ranks stop the server and exit
        server.wait(120)
        log.seek(0)
        account = re.search(r"\(([\d.]+) ms per step\); ([\d.]+) s in passes of ([\d.]+) s busy", log.read())
    return results, [float(x) for x in account.groups()] if account else [float("nan")] * 3


def one_round(args, prompts, work):
    figures, answers = batch_job(args, prompts, work)
    results, (server_step_ms, passes, busy) = serve_run(args, prompts, work)
    tokens = args.requests * args.new_tokens
    wall = max(r[3] for r in results) - min(r[0] for r in results)
    ttft = sorted(r[1] for r in results)
    gaps = [g for r in results for g in r[2]]
    row = {
        "batch_generation_s": figures["generation_s"], "batch_tokens_per_s": tokens / figures["generation_s"],
        "batch_mean_ttft_s": figures["mean_ttft_s"], "batch_decode_ms_per_step": figures["decode_ms_per_step"],
        "server_wall_s": wall, "server_tokens_per_s": tokens / wall,
        "server_ttft_p50_s": statistics.median(ttft), "server_ttft_p95_s": ttft[int(0.95 * (len(ttft) - 1))],
        "server_inter_token_ms_mean": 1e3 * statistics.fmean(gaps) if gaps else None,
        "server_decode_ms_per_step": server_step_ms, "server_pass_s": passes, "server_busy_s": busy,
        "server_overhead_of_busy": (busy - passes) / busy if busy > 0 else None,
        "answers_equal_to_batch": sum(r[4] == a for r, a in zip(results, answers)),
    }
    row["ratio_server_to_batch"] = row["server_tokens_per_s"] / row["batch_tokens_per_s"]
    print(f"  batch job {row['batch_tokens_per_s']:6.1f} tokens/s ({row['batch_decode_ms_per_step']:.1f} ms/step) | "
          f"server {row['server_tokens_per_s']:6.1f} tokens/s ({server_step_ms:.1f} ms/step; time to first token "
          f"p50 {row['server_ttft_p50_s']:.3f} s, p95 {row['server_ttft_p95_s']:.3f} s; "
          f"{row['server_inter_token_ms_mean']:.1f} ms between tokens) | ratio {row['ratio_server_to_batch']:.3f} | "
          f"server busy {busy:.3f} s, passes {passes:.3f} s | answers equal to the batch job's: "
          f"{row['answers_equal_to_batch']} of {len(answers)}", flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--preset", default="tinyllama")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--act-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--mode", default="tp", choices=["tp", "2d", "dp", "hybrid"],
                   help="dp and hybrid: --concurrency is split over the replicas' slots")
    p.add_argument("--logprobs", type=int, help="every request asks for log-probabilities, N alternatives")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    args.replicas = args.ranks if args.mode == "dp" else args.ranks // 2 if args.mode == "hybrid" else 1
    rng = np.random.default_rng(5)
    prompts = [[int(t) for t in rng.integers(100, 20000, args.prompt_len)] for _ in range(args.requests)]
    print(f"{args.requests} requests of {args.prompt_len} prompt + {args.new_tokens} new tokens, {args.concurrency} "
          f"at a time, {args.preset} on {args.ranks} ranks ({args.mode}), {args.rounds} round(s)")
    with tempfile.TemporaryDirectory() as work:
        rounds = [one_round(args, prompts, work) for _ in range(args.rounds)]
    ratios = sorted(r["ratio_server_to_batch"] for r in rounds)
    overheads = [r["server_overhead_of_busy"] for r in rounds]
    print(f"server / batch job: median {statistics.median(ratios):.3f} (range {ratios[0]:.3f}-{ratios[-1]:.3f}); "
          f"the server's own share of its busy time: {max(overheads):.4f} at most")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"requests": args.requests, "concurrency": args.concurrency, "prompt_len": args.prompt_len,
                       "new_tokens": args.new_tokens, "ranks": args.ranks, "preset": args.preset,
                       "act_dtype": args.act_dtype, "mode": args.mode, "logprobs": args.logprobs, "rounds": rounds},
                      f, indent=1)


if __name__ == "__main__":
    main()
