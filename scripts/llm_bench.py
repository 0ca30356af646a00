#!/usr/bin/env python3
"""The LLM job's speed against what the machine allows, every limit measured in the same run.

Limits, measured first:
  - read bandwidth with 1 core and with 2 cores streaming at once (meshnn-kernel-bench --bandwidth);
  - the matmul kernels' one-row speed on the model's shapes (meshnn-kernel-bench, bfloat16
    activations, each weight format): on 1 core, and with both cores busy at once, each on half of
    every matmul (--ceiling), as 2 tensor-parallel ranks run. The issue's kernel limit is the
    kernels' speed with the weights in cache, so a matmul whose weights would not fit in a quarter of
    the last-level cache is timed on a column slice that does, and its rate applied to the whole.
Then meshnn-llm runs (generated model of --preset, prompts of --prompt-len); limits and runs are
repeated --rounds times (default 3), each round against its own limits:
  - decode, one user: 1 rank on 1 core and 2 ranks in tp on 2 cores, per weight format. Against
    min(bandwidth limit, kernel limit): bandwidth limit = matmul weight bytes per token per rank /
    (bandwidth of that many cores / ranks); kernel limit = the kernels' time for the rank's shapes.
  - prefill of the prompt: the matmuls' share of the prefill time, 2 ranks against 1;
  - with --users N (default 32): decode of N users at once on 2 ranks, the matmuls' share of a step;
  - with --batching: N * 2 requests of ragged prompts on N slots against one static batch of N
    producing as many tokens (tokens / whole generation time);
  - each rank's peak memory against its weight shards + KV cache.
Every figure goes to RESULTS/llm_bench.json and a Markdown table on stdout.

  scripts/llm_bench.sh                                 # TinyLlama shapes, bfloat8_b and bfloat4_b
  scripts/llm_bench.sh --dtypes bfloat8_b --new-tokens 32 --users 0
"""
import argparse
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = {  # hidden, intermediate, layers, heads, kv_heads, vocab, head_dim (as models/llama/config.cpp)
    "tiny": (112, 200, 2, 8, 2, 250, 14),
    "tinyllama": (2048, 5632, 22, 32, 4, 32000, 64),
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 151936, 64),
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 151936, 128),
    "phi3-mini": (3072, 8192, 32, 32, 32, 32064, 96),
    "llama3-8b": (4096, 14336, 32, 32, 8, 128256, 128),
}


def tile(n):
    return (n + 31) // 32 * 32


def shard_shapes(preset, layers, ranks):
    """(K, N, count) of every matmul a rank runs per token, as model.cpp fuses and shards them."""
    # ranks = 1 is the whole model; 2 ranks split every matmul's N or K in two.
    hidden, inter, preset_layers, heads, kv, vocab, d = PRESETS[preset]
    layers = layers or preset_layers
    q_heads, kv_heads = heads // ranks, max(1, kv // ranks)
    chunk_i, chunk_v = -(-inter // ranks), -(-vocab // ranks)
    return [(hidden, tile(q_heads * d) + 2 * tile(kv_heads * d), layers),  # fused q|k|v
            (q_heads * d, hidden, layers),                                 # o_proj rows
            (hidden, 2 * tile(chunk_i), layers),                           # fused gate|up
            (chunk_i, hidden, layers),                                     # down_proj rows
            (hidden, chunk_v, 1)]                                          # lm_head columns


# Bytes per weight of each format (a 32x32 tile's bytes / 1024).
WEIGHT_BYTES = {"float32": 4.0, "bfloat16": 2.0, "bfloat8_b": 1088 / 1024, "bfloat4_b": 576 / 1024}


def cache_budget_bytes():
    """A quarter of the last-level cache (sysfs), so that a timed slice stays in it between calls."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    largest = 0
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        try:
            with open(os.path.join(base, index, "size")) as f:
                text = f.read().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        largest = max(largest, int(text.rstrip("KM")) * scale)
    return largest // 4 if largest else 4 << 20


def in_cache_shape(k, n, dtype, budget):
    """(K, N') with N' the widest whole-tile column slice of N whose weights fit in the budget."""
    columns = int(budget // (k * WEIGHT_BYTES[dtype])) // 32 * 32
    return k, max(32, min(n, columns))


def run(cmd, env=None, quiet=False):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, **(env or {})))
    if not quiet or r.returncode != 0:
        sys.stdout.write(r.stdout)
    if r.returncode != 0:
        raise SystemExit(f"failed with status {r.returncode}")
    return r.stdout


def load(path):
    with open(path) as f:
        return json.load(f)


def llm(args, ranks, dtype, tag, extra):
    out = os.path.join(args.results, f"llm_{tag}.json")
    cmd = [os.path.join(ROOT, "scripts", "mpirun.sh"), "-np", str(ranks),
           os.path.join(args.build, "apps", "meshnn-llm"), "--mesh", f"1x{ranks}", "--mode", "tp",
           "--preset", args.preset, "--layers", str(args.layers), "--weight-dtype", dtype,
           "--ignore-eos", "--json", out] + extra
    # One core per rank: the 1-rank run must not take the second core.
    run(cmd, env={"MESHNN_NUM_THREADS": "1"}, quiet=True)
    return load(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--results", default=os.path.join(ROOT, "results", "llm_bench"))
    p.add_argument("--preset", default="tinyllama", choices=sorted(PRESETS))
    p.add_argument("--layers", type=int, default=0, help="0: the preset's")
    p.add_argument("--dtypes", default="bfloat8_b,bfloat4_b")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--users", type=int, default=32, help="decode batch of the many-user run (0: skip)")
    p.add_argument("--rounds", type=int, default=3,
                   help="limits measured, then the decode and prefill runs, this many times (the median is shown)")
    p.add_argument("--batching", action="store_true", help="also the continuous-batching comparison")
    p.add_argument("--only-batching", action="store_true", help="only the continuous-batching comparison")
    args = p.parse_args()
    os.makedirs(args.results, exist_ok=True)
    kb = os.path.join(args.build, "apps", "meshnn-kernel-bench")
    dtypes = args.dtypes.split(",")

    record = {"preset": args.preset}
    if not args.only_batching:
        measure_decode_and_prefill(args, kb, dtypes, record)
        if args.users > 0:
            measure_users(args, dtypes[0], record)
    if (args.batching or args.only_batching) and args.users > 0:
        measure_batching(args, dtypes[0], record)
    with open(os.path.join(args.results, "llm_bench.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"\nwrote {os.path.join(args.results, 'llm_bench.json')}")


def measure_limits(args, kb, dtypes, suffix):
    """Read bandwidth (GB/s by core count) and the kernels' seconds per token per rank, (ranks, dtype)."""
    bw_json = os.path.join(args.results, f"bandwidth{suffix}.json")
    run([kb, "--bandwidth", "--threads", "1,2", "--json", bw_json])
    bandwidth = {r["threads"]: r["read_GBps"] for r in load(bw_json)}
    # The kernels' own rate on the shapes of one rank's work: 1 rank runs the whole model's shapes on
    # one core; 2 ranks each run half of every matmul, both cores busy at once, which is what the
    # bench's --ceiling times (independent 1-thread matmuls on every core, each on half of N).
    kernel_time = {}
    shapes = shard_shapes(args.preset, args.layers, 1)
    budget = cache_budget_bytes()
    for d in dtypes:
        timed = {in_cache_shape(k, n, d, budget) for k, n, _ in shapes}
        k_json = os.path.join(args.results, f"kernels_{d}{suffix}.json")
        run([kb, "--threads", "1,2", "--ceiling", "--act", "bfloat16", "--dtypes", d, "--openblas-threads", "1",
             "--min-time", "0.3", "--shapes", ",".join(f"1x{k}x{n}" for k, n in sorted(timed)), "--json", k_json])
        rates = {(r["K"], r["N"], r["threads"]): r for r in load(k_json)}

        def seconds(key, threads):  # the rank's matmuls at the rate of their in-cache slices
            return sum(c * 2 * k * n / (rates[in_cache_shape(k, n, d, budget) + (threads,)][key] * 1e9)
                       for k, n, c in shapes)

        kernel_time[(1, d)] = seconds("gflops", 1)
        kernel_time[(2, d)] = seconds("ceiling_gflops", 2)
    return bandwidth, kernel_time


def measure_decode_and_prefill(args, kb, dtypes, record):
    # Rounds: each measures the limits and then runs the jobs against them, so that every ratio
    # compares figures taken minutes apart on a machine whose speed drifts; the table shows the
    # median ratio of the rounds and their range.
    record.update({"rounds": [], "decode": [], "prefill": {}})
    ratios = {}  # (dtype, ranks) -> [ratio per round]
    rows = {}
    for i in range(args.rounds):
        suffix = f"_r{i}" if args.rounds > 1 else ""
        bandwidth, kernel_time = measure_limits(args, kb, dtypes, suffix)
        record["rounds"].append({"bandwidth_GBps": bandwidth})
        print(f"\nround {i + 1}: read bandwidth {bandwidth[1]:.2f} GB/s with 1 core, {bandwidth[2]:.2f} GB/s with 2")
        for d in dtypes:
            for ranks in (1, 2):
                r = llm(args, ranks, d, f"decode_{d}_{ranks}{suffix}",
                        ["--batch", "1", "--prompt-len", str(args.prompt_len), "--max-new-tokens", str(args.new_tokens)])
                per_rank_bw = bandwidth[ranks] / ranks
                t_bw = r["matmul_weight_bytes"] / (per_rank_bw * 1e9)
                t_kernel = kernel_time[(ranks, d)]
                limit = 1 / max(t_bw, t_kernel)
                measured = 1e3 / r["decode_ms_per_step"]
                ratio = measured / limit
                ratios.setdefault((d, ranks), []).append(ratio)
                row = (d, ranks, measured, 1 / t_bw, 1 / t_kernel, "bandwidth" if t_bw >= t_kernel else "kernel",
                       ratio, r["decode_matmul_ms_per_step"] / r["decode_ms_per_step"],
                       r["peak_mib"] / (r["weights_mib"] + r["kv_mib"]))
                print(f"  {d}, {ranks} rank(s): {measured:.2f} tokens/s, {ratio:.2f} of the {row[5]} limit")
                # The table shows the round whose ratio is the median's.
                rows.setdefault((d, ranks), []).append(row)
                record["decode"].append({"round": i, "dtype": d, "ranks": ranks, "run": r, "bandwidth_limit_tps": 1 / t_bw,
                                         "kernel_limit_tps": 1 / t_kernel, "ratio": ratio})
                record["prefill"][f"{d}_{ranks}{suffix}"] = r
    print("\n| weights | ranks | decode tok/s | bandwidth limit | kernel limit | binds | of limit (target 0.90) "
          "| range over rounds | matmul share of step | peak / (weights + KV) (target <= 1.15) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key, round_rows in rows.items():
        d, ranks, m, bw, kl, binds, ratio, share, mem = sorted(round_rows, key=lambda row: row[6])[len(round_rows) // 2]
        rs = ratios[key]
        print(f"| {d} | {ranks} | {m:.2f} | {bw:.2f} | {kl:.2f} | {binds} | {ratio:.2f} | {min(rs):.2f}-{max(rs):.2f} "
              f"| {share:.2f} | {mem:.2f} |")

    print("\n| weights | round | prefill s, 1 rank | prefill s, 2 ranks | 2 ranks vs 1 (target 1.8) | matmul share, 2 ranks (target 0.80) |")
    print("|---|---|---|---|---|---|")
    for i in range(args.rounds):
        suffix = f"_r{i}" if args.rounds > 1 else ""
        for d in dtypes:
            one, two = record["prefill"][f"{d}_1{suffix}"], record["prefill"][f"{d}_2{suffix}"]
            print(f"| {d} | {i + 1} | {one['prefill_s']:.3f} | {two['prefill_s']:.3f} | {one['prefill_s'] / two['prefill_s']:.2f} "
                  f"| {two['prefill_matmul_s'] / two['prefill_s']:.2f} |")


def measure_users(args, d, record):
    r = llm(args, 2, d, f"users{args.users}", ["--batch", str(args.users), "--max-batch", str(args.users),
                                               "--prompt-len", str(args.prompt_len // 4),
                                               "--max-new-tokens", str(args.new_tokens // 2)])
    record["users"] = r
    print(f"\n{args.users} users, 2 ranks, {d}: {r['decode_ms_per_step']:.1f} ms per step, "
          f"{r['decode_tokens_per_s']:.1f} tokens/s in total, matmuls "
          f"{r['decode_matmul_ms_per_step'] / r['decode_ms_per_step']:.2f} of the step (target 0.80)")

def measure_batching(args, d, record):
    # Both sides prefill about as many prompt tokens and generate the same number: 2N requests
    # with prompts of 1..L and 1..2T new tokens (seeded; the means are about L/2 and T) against
    # N requests of L prompt tokens and 2T new tokens each.
    n, t, length = args.users, args.new_tokens // 4, args.prompt_len // 4
    tokens = os.path.join(args.results, "ragged_prompts.h5")
    run([os.path.join(args.build, "apps", "meshnn-make-weights"), "--model", "llama", "--preset", args.preset,
         "--output", os.path.join(args.results, "unused_weights.h5"), "--layers", "1", "--tokens", tokens,
         "--batch", str(2 * n), "--prompt-len", str(length), "--ragged", "--max-new-tokens", str(2 * t)], quiet=True)
    mixed = llm(args, 2, d, "batching_mixed", ["--tokens", tokens, "--max-batch", str(n)])
    static = llm(args, 2, d, "batching_static", ["--batch", str(n), "--max-batch", str(n),
                                                "--prompt-len", str(length), "--max-new-tokens", str(2 * t)])
    rate = lambda r: r["generated_tokens"] / r["generation_s"]
    record["batching"] = {"mixed": mixed, "static": static, "ratio": rate(mixed) / rate(static)}
    print(f"\ncontinuous batching: {2 * n} requests of 1-{length} prompt and 1-{2 * t} new tokens on {n} slots, "
          f"{mixed['generated_tokens']} tokens at {rate(mixed):.1f} tokens/s; one static batch of {n} "
          f"({length} + {2 * t} tokens each), {static['generated_tokens']} tokens at {rate(static):.1f} tokens/s: "
          f"{rate(mixed) / rate(static):.2f} (target 0.90)")

if __name__ == "__main__":
    main()
