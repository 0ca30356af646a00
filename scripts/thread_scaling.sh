#!/usr/bin/env bash
# How well one rank's kernels use its second core, against what the machine allows.
#
# For each shape and weight dtype, three figures from meshnn-kernel-bench:
#   1 thread alone, 2 threads in one process, and two 1-thread processes run at the same time.
# "2 threads / 1" is issue #4's target (>= 1.8x at prefill). "2 processes / 1" is the ceiling the
# machine itself sets when both cores are busy (shared memory bandwidth, shared caches, clock
# limits); a gap between the two is ours, a low ceiling is the machine's. The two processes run the
# same sequence of measurements side by side, so their rows overlap in time (not exactly).
#
# Usage: scripts/thread_scaling.sh [repetitions (default 2)] [extra meshnn-kernel-bench options]
#   default options: --shapes prefill128,prefill2048 --min-time 1
set -euo pipefail
source "$(dirname "$0")/common.sh"

reps="${1:-2}"
shift || true
bench="$MESHNN_BUILD/apps/meshnn-kernel-bench"
[[ -x "$bench" ]] || "$MESHNN_ROOT/scripts/build.sh"
options=(--shapes prefill128,prefill2048 --min-time 1 --openblas-threads 1)
[[ $# -gt 0 ]] && options=("$@" --openblas-threads 1)

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= reps; r++)); do
  "$bench" "${options[@]}" --threads 1,2 --json "$out/threads.$r.json" >/dev/null
  "$bench" "${options[@]}" --threads 1 --json "$out/first.$r.json" >/dev/null &
  "$bench" "${options[@]}" --threads 1 --json "$out/second.$r.json" >/dev/null
  wait
done

/usr/bin/python3 - "$out" "$reps" <<'EOF'
import json, sys
out, reps = sys.argv[1], int(sys.argv[2])
def load(name):
    return {(r["M"], r["K"], r["N"], r["weight_dtype"], r["threads"]): r["gflops"] for r in json.load(open(f"{out}/{name}"))}
print(f"{'shape':>18} {'weights':>10} {'rep':>3} {'1 thread':>9} {'2 threads':>10} {'ratio':>6} | {'2 procs':>8} {'ratio':>6}  (GFLOP/s)")
for r in range(1, reps + 1):
    threads, first, second = load(f"threads.{r}.json"), load(f"first.{r}.json"), load(f"second.{r}.json")
    for (m, k, n, dtype, t), one in threads.items():
        if t != 1:
            continue
        two = threads[(m, k, n, dtype, 2)]
        pair = first[(m, k, n, dtype, 1)] + second[(m, k, n, dtype, 1)]
        print(f"{f'{m}x{k}x{n}':>18} {dtype:>10} {r:>3} {one:9.1f} {two:10.1f} {two / one:6.2f} | {pair:8.1f} {pair / one:6.2f}")
EOF
