#!/usr/bin/env bash
# How well one rank's kernels use its second core, against what the machine allows.
#
# For each shape and weight dtype, three figures from one meshnn-kernel-bench run, measured in
# alternation round by round (so a busy spell of a shared machine lands on all three):
#   1 thread, 2 threads in one matmul, and the ceiling: two independent 1-thread matmuls at once,
#   one per core, each on its own half of N (--ceiling; nothing shared, no waiting on each other).
# "2 threads / 1" is issue #4's target (>= 1.8x at prefill). "ceiling / 1" is what two busy cores
# of this machine deliver on the same work (shared memory bandwidth and caches, clock limits);
# "of ceiling" near 1.0 means the threading itself loses nothing.
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
  "$bench" "${options[@]}" --threads 1,2 --ceiling --json "$out/threads.$r.json" >/dev/null
done

/usr/bin/python3 - "$out" "$reps" <<'EOF'
import json, sys
out, reps = sys.argv[1], int(sys.argv[2])
print(f"{'shape':>18} {'weights':>10} {'rep':>3} {'1 thread':>9} {'2 threads':>10} {'ratio':>6} | "
      f"{'ceiling':>8} {'ratio':>6} {'of ceiling':>10}  (GFLOP/s)")
for r in range(1, reps + 1):
    rows = {(x["M"], x["K"], x["N"], x["weight_dtype"], x["threads"]): x for x in json.load(open(f"{out}/threads.{r}.json"))}
    for (m, k, n, dtype, t), row in rows.items():
        if t != 1:
            continue
        one, two = row["gflops"], rows[(m, k, n, dtype, 2)]
        ceiling = two["ceiling_gflops"]
        print(f"{f'{m}x{k}x{n}':>18} {dtype:>10} {r:>3} {one:9.1f} {two['gflops']:10.1f} {two['gflops'] / one:6.2f} | "
              f"{ceiling:8.1f} {ceiling / one:6.2f} {two['gflops'] / ceiling:10.2f}")
EOF
