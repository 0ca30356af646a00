#!/usr/bin/env python3
"""Scaling benchmark of either job: the Falcon MLP job (meshnn-mlp) or, with --job llm, the LLM job (meshnn-llm).

Sweeps rank counts, parallel modes (tp, 2d, dp, hybrid: both jobs have all four), weight dtypes and
batch sizes; runs the job once per point through scripts/mpirun.sh; writes a CSV table and a PNG plot.

Each rank is one device with --threads-per-rank worker threads (default 1), so that adding ranks adds
compute as adding devices does. Strong scaling keeps the batch fixed as ranks grow; weak scaling grows the batch with the ranks.
Speed-up is throughput against the 1-rank run of the same mode, dtype and scaling kind:
(1-rank time per token) / (N-rank time per token); ideal = N.

MLP job: time per token is the job's best pass (each timed pass on its slowest rank, then the
fastest of the --iterations passes): interference from other work on a shared machine only slows
passes down, so the best pass is what repeats from run to run. The mean pass is in the CSV beside
it. The plot: time per token, speed-up against the ideal line, compute/communication split per pass.

LLM job: a point is one generation (--batch users, prompts of --seq tokens, --new-tokens each,
--ignore-eos). Time per token is the decode step's time per token of all users (the slowest rank's
mean step / users); decode_tokens_per_s is its inverse, the decode rate of all users (all replicas).
compute_ms and comm_ms split a decode step; prefill_ms, prefill_compute_ms and prefill_comm_ms split
the whole prefill (slowest rank); ttft_s is the mean time to first token. The plot adds a panel of
the mean time to first token per rank count and a panel of the prefill's split. Its strong scaling
keeps the users fixed; weak scaling grows them.

dp and hybrid split the batch over their replicas, so their strong-scaling batch is at least the
replica count of the largest rank count (dp: the ranks; hybrid: the mesh rows).

  scripts/scaling.sh                                   # defaults: ranks 1,2,4,8, tp, 2d, dp and hybrid, bfloat16
  scripts/scaling.sh --ranks 1,2 --modes tp --dtypes bfloat16,bfloat8_b --hidden 256 --intermediate 1024
  scripts/scaling.sh --hostfile hostfiles/t3000.txt --ranks 8 --modes 2d
  scripts/scaling.sh --job llm --dtypes bfloat8_b --batch 8 --preset tinyllama --layers 4
"""
import argparse
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mesh_for(mode, ranks):
    """Mesh shape for a mode: 1-D modes use 1xN; 2d and hybrid use two rows when they can."""
    if mode in ("2d", "hybrid") and ranks >= 4 and ranks % 2 == 0:
        return (2, ranks // 2)
    return (1, ranks)


def replicas_for(mode, ranks):
    """Model replicas a mode runs on N ranks: each takes its share of the batch."""
    if mode == "dp":
        return ranks
    if mode == "hybrid":  # one tensor-parallel replica per mesh row (the jobs' default submesh)
        return mesh_for(mode, ranks)[0]
    return 1


def launch(args, ranks, app_args, json_path):
    """Runs one job through scripts/mpirun.sh and returns its JSON record."""
    cmd = [os.path.join(ROOT, "scripts", "mpirun.sh"), "-np", str(ranks)]
    if args.hostfile:
        cmd += ["--hostfile", args.hostfile]
    cmd += app_args + ["--json", json_path]
    print("+", " ".join(cmd), flush=True)
    # Each rank is one device with a fixed budget of worker threads, so adding ranks adds compute
    # (a lone rank would otherwise take every core of the node and hide the scaling).
    env = dict(os.environ, MESHNN_NUM_THREADS=str(args.threads_per_rank))
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if result.returncode != 0:
        sys.stdout.write(result.stdout)
        raise SystemExit(f"run failed with status {result.returncode}")
    with open(json_path) as f:
        return json.load(f)


def run_point(args, build, weights, ranks, mode, dtype, batch, json_path):
    rows, cols = mesh_for(mode, ranks)
    record = launch(args, ranks, [
        os.path.join(build, "apps", "meshnn-mlp"), "--mesh", f"{rows}x{cols}", "--mode", mode,
        "--tp-variant", args.tp_variant, "--weights", weights, "--weight-dtype", dtype,
        "--act-dtype", args.act_dtype, "--batch", str(batch), "--seq", str(args.seq),
        "--iterations", str(args.iterations), "--warmup", "1"], json_path)
    record["mesh"] = f"{rows}x{cols}"
    return record


def run_llm_point(args, build, ranks, mode, dtype, batch, json_path):
    rows, cols = mesh_for(mode, ranks)
    r = launch(args, ranks, [
        os.path.join(build, "apps", "meshnn-llm"), "--mesh", f"{rows}x{cols}", "--mode", mode,
        "--preset", args.preset, "--layers", str(args.layers), "--weight-dtype", dtype,
        "--act-dtype", args.act_dtype, "--batch", str(batch), "--max-batch", str(batch),
        "--prompt-len", str(args.seq), "--max-new-tokens", str(args.new_tokens), "--ignore-eos"], json_path)
    # Decode: every user advances one token per step, so a token costs step / users (dp and hybrid
    # replicas step side by side: their total rate is what decode_tokens_per_s sums).
    per_token = 1e3 / r["decode_tokens_per_s"] if r["decode_tokens_per_s"] > 0 else 0.0
    prefill_comm_s = r["prefill_comm_s"]
    return {"mesh": f"{rows}x{cols}", "best_time_per_token_ms": per_token, "time_per_token_ms": per_token,
            "compute_ms": r["decode_ms_per_step"] - r["decode_comm_ms_per_step"],
            "comm_ms": r["decode_comm_ms_per_step"], "ttft_s": r["mean_ttft_s"],
            "decode_tokens_per_s": r["decode_tokens_per_s"], "prefill_tokens_per_s": r["prefill_tokens_per_s"],
            "prefill_ms": 1e3 * r["prefill_s"], "prefill_compute_ms": 1e3 * (r["prefill_s"] - prefill_comm_s),
            "prefill_comm_ms": 1e3 * prefill_comm_s}


def series_of(rows):
    """Rows grouped into one line per (mode, dtype, scaling), each sorted by rank count."""
    series = {}
    for r in rows:
        series.setdefault((r["mode"], r["weight_dtype"], r["scaling"]), []).append(r)
    return {key: sorted(points, key=lambda r: r["ranks"]) for key, points in sorted(series.items())}


def rank_lines(ax, rows, key, ylabel, title):
    """One line per (mode, dtype, scaling) of a figure against the rank count."""
    for (mode, dtype, scaling), points in series_of(rows).items():
        ax.plot([p["ranks"] for p in points], [p[key] for p in points], marker="o", label=f"{mode} {dtype} {scaling}")
    ax.set_ylabel(ylabel)
    ax.set_title(title)


def rank_axis(ax, cores, max_ranks):
    """Log-2 rank axis, with the rank counts beyond this machine's cores shaded."""
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    if cores:
        ax.axvspan(cores + 0.5, max(max_ranks, cores + 1) * 1.2, color="grey", alpha=0.12,
                   label=f"oversubscribed (> {cores} cores)")
    ax.legend(fontsize=7)


def split_bars(ax, rows, compute_key, comm_key, ylabel, title):
    """Stacked compute + communication bars, one per point."""
    labels = [f"{r['mode']} {r['weight_dtype'][:9]} {r['scaling'][0]} {r['ranks']}r" for r in rows]
    compute = [r[compute_key] for r in rows]
    comm = [r[comm_key] for r in rows]
    positions = list(range(len(rows)))
    ax.bar(positions, compute, label="compute")
    ax.bar(positions, comm, bottom=compute, label="communication")
    ax.set_xticks(positions)
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)


def plot(rows, png, cores, job="mlp"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The LLM job has a second row: decode rate, time to first token and the prefill's split, the
    # figures the issue asks for beside time per token.
    nrows = 2 if job == "llm" else 1
    fig, axes = plt.subplots(nrows, 3, figsize=(17, 5 * nrows), squeeze=False)
    max_ranks = max(r["ranks"] for r in rows)
    rank_lines(axes[0][0], rows, "time_per_token_ms", "time per token (ms)",
               "Falcon MLP: time per token" if job == "mlp" else "LLM decode: time per token (all users)")
    rank_lines(axes[0][1], rows, "speedup", "speed-up vs 1 rank", "speed-up (throughput)")
    ideal = [x for x in (1, 2, 4, 8, 16, 32, 64) if x <= max_ranks]
    axes[0][1].plot(ideal, ideal, "k--", label="ideal")
    rank_panels = [axes[0][0], axes[0][1]]
    split_bars(axes[0][2], rows, "compute_ms", "comm_ms",
               "ms per forward pass (mean pass, slowest rank)" if job == "mlp" else "ms per decode step (slowest rank)",
               "compute / communication split" if job == "mlp" else "decode: compute / communication split")
    if job == "llm":
        rank_lines(axes[1][0], rows, "decode_tokens_per_s", "tokens/s (all users, all replicas)",
                   "LLM decode: tokens/s")
        rank_lines(axes[1][1], rows, "ttft_s", "mean time to first token (s)", "LLM: time to first token")
        rank_panels += [axes[1][0], axes[1][1]]
        split_bars(axes[1][2], rows, "prefill_compute_ms", "prefill_comm_ms", "ms of the whole prefill (slowest rank)",
                   "prefill: compute / communication split")
    for ax in rank_panels:
        rank_axis(ax, cores, max_ranks)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--job", default="mlp", choices=["mlp", "llm"])
    p.add_argument("--preset", default="tinyllama", help="llm: generated model preset")
    p.add_argument("--layers", type=int, default=0, help="llm: layers of the generated model (0: the preset's)")
    p.add_argument("--new-tokens", type=int, default=16, help="llm: tokens generated per user")
    p.add_argument("--ranks", default="1,2,4,8")
    p.add_argument("--modes", default="tp,2d,dp,hybrid")
    p.add_argument("--dtypes", default="bfloat16")
    p.add_argument("--batch", type=int, default=1,
                   help="strong-scaling batch (dp, hybrid: at least the largest rank count's replicas) and weak-scaling batch per rank")
    p.add_argument("--scaling", default="strong,weak", help="strong, weak or both")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--hidden", type=int, default=4544)
    p.add_argument("--intermediate", type=int, default=18176)
    p.add_argument("--act-dtype", default="bfloat16")
    p.add_argument("--tp-variant", default="reduce_scatter")
    p.add_argument("--iterations", type=int, default=5, help="timed passes per point (best and mean reported)")
    p.add_argument("--repeats", type=int, default=1, help="runs of every point, interleaved; the best is kept")
    p.add_argument("--threads-per-rank", type=int, default=1, help="worker threads of each rank (its device's cores)")
    p.add_argument("--hostfile", default="")
    p.add_argument("--out-dir", default=os.path.join(ROOT, "results", "scaling"))
    p.add_argument("--build", default=os.environ.get("MESHNN_BUILD", os.path.join(ROOT, "build")))
    args = p.parse_args()

    ranks_list = [int(x) for x in args.ranks.split(",")]
    if 1 not in ranks_list:
        ranks_list = [1] + ranks_list  # speed-ups need the 1-rank baseline
    os.makedirs(args.out_dir, exist_ok=True)
    cores = os.cpu_count() if not args.hostfile else 0
    weights = os.path.join(args.out_dir, f"falcon_mlp_{args.hidden}x{args.intermediate}.h5")
    if args.job == "mlp" and not os.path.exists(weights):
        subprocess.run([os.path.join(args.build, "apps", "meshnn-make-weights"), "--output", weights,
                        "--hidden", str(args.hidden), "--intermediate", str(args.intermediate)], check=True)

    rows = []
    for scaling in args.scaling.split(","):
        for mode in args.modes.split(","):
            for dtype in args.dtypes.split(","):
                def batch_for(ranks):
                    if scaling == "weak":
                        return args.batch * ranks
                    # dp and hybrid need a batch to split: a replica with no share would sit idle
                    # and the point would time fewer replicas than it has.
                    return max(args.batch, max(replicas_for(mode, r) for r in ranks_list))

                # --repeats rounds over all rank counts, the best run of each kept: the rounds
                # interleave, so a slow spell of the machine hits every rank count alike.
                best = {}
                for _ in range(args.repeats):
                    for ranks in sorted(ranks_list):
                        last = os.path.join(args.out_dir, "last_run.json")
                        if args.job == "llm":
                            rec = run_llm_point(args, args.build, ranks, mode, dtype, batch_for(ranks), last)
                        else:
                            rec = run_point(args, args.build, weights, ranks, mode, dtype, batch_for(ranks), last)
                        if ranks not in best or rec["best_time_per_token_ms"] < best[ranks]["best_time_per_token_ms"]:
                            best[ranks] = rec
                baseline = best[min(ranks_list)]["best_time_per_token_ms"]
                for ranks in sorted(ranks_list):
                    rec = best[ranks]
                    rows.append({
                        "ranks": ranks, "mesh": rec["mesh"], "mode": mode, "weight_dtype": dtype,
                        "batch": batch_for(ranks), "seq": args.seq, "scaling": scaling,
                        "time_per_token_ms": round(rec["best_time_per_token_ms"], 6),
                        "speedup": round(baseline / rec["best_time_per_token_ms"], 3),
                        "mean_time_per_token_ms": round(rec["time_per_token_ms"], 6),
                        "compute_ms": round(rec["compute_ms"], 3), "comm_ms": round(rec["comm_ms"], 3),
                        "oversubscribed": bool(cores) and ranks > cores,
                    })
                    if args.job == "llm":
                        rows[-1].update({
                            "decode_tokens_per_s": round(rec["decode_tokens_per_s"], 3),
                            "ttft_s": round(rec["ttft_s"], 6),
                            "prefill_ms": round(rec["prefill_ms"], 3),
                            "prefill_compute_ms": round(rec["prefill_compute_ms"], 3),
                            "prefill_comm_ms": round(rec["prefill_comm_ms"], 3),
                            "prefill_tokens_per_s": round(rec["prefill_tokens_per_s"], 1)})
                    print(rows[-1], flush=True)
    csv_path = os.path.join(args.out_dir, "scaling.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    png_path = os.path.join(args.out_dir, "scaling.png")
    try:
        plot(rows, png_path, cores, args.job)
        print(f"wrote {csv_path} and {png_path}")
    except ImportError:
        # The CSV is the result; the plot needs matplotlib (scripts/scaling.sh installs Debian's).
        print(f"wrote {csv_path}; no plot: matplotlib is not importable by {sys.executable} "
              "(run scripts/scaling.sh, or scripts/install_deps.sh --plot and /usr/bin/python3)")
    over = sorted({r["ranks"] for r in rows if r["oversubscribed"]})
    print(f"oversubscribed rank counts on this machine ({cores} cores): {over or 'none'}" if cores else
          "ran over a hostfile: oversubscription not judged")


if __name__ == "__main__":
    main()
