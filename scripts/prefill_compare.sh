#!/usr/bin/env bash
# Two ways of running the LLM job's prefill, alternating run by run so that both see the same
# machine: meshnn-llm prefills one prompt (TinyLlama shapes, bfloat16 activations, 1 thread per
# rank) in tp over `ranks` ranks, and each run's prefill and matmul times are printed with the
# median ratios A / B. The ways:
#   f32-products   float32 products (MESHNN_KERNELS=avx512)
#   bf16-products  bfloat16 products where the CPU has AVX512-BF16 (the default kernels)
#   hand           o_proj / down_proj and their reductions hand-placed (--prefill-matmul hand)
#   planned        the same through distributed::matmul (--prefill-matmul planned, the default)
#   scripts/prefill_compare.sh A B [ranks (default 2)] [rounds (default 3)] [weight dtype (default bfloat8_b)]
set -euo pipefail
source "$(dirname "$0")/common.sh"
[[ $# -ge 2 ]] || { sed -n '2,10p' "$0"; exit 2; }
a=$1
b=$2
ranks=${3:-2}
rounds=${4:-3}
dtype=${5:-bfloat8_b}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # run WAY JSON
  local env=() flags=()
  case $1 in
    f32-products) env=(MESHNN_KERNELS=avx512) ;;
    bf16-products) ;;
    hand) flags=(--prefill-matmul hand) ;;
    planned) flags=(--prefill-matmul planned) ;;
    *) echo "unknown way '$1' (f32-products, bf16-products, hand, planned)" >&2; exit 2 ;;
  esac
  env "${env[@]}" MESHNN_NUM_THREADS=1 "$MESHNN_ROOT/scripts/mpirun.sh" -np "$ranks" \
    "$MESHNN_BUILD/apps/meshnn-llm" --mesh "1x$ranks" --mode tp --preset tinyllama --weight-dtype "$dtype" \
    --act-dtype bfloat16 --batch 1 --prompt-len 128 --max-new-tokens 1 --ignore-eos "${flags[@]}" \
    --json "$2" >/dev/null
}

for round in $(seq "$rounds"); do
  run "$a" "$out/a.$round.json"
  run "$b" "$out/b.$round.json"
done
/usr/bin/python3 - "$out" "$rounds" "$ranks" "$dtype" "$a" "$b" <<'PY'
import json, statistics, sys
out, rounds, ranks, dtype, a, b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
rows = []
for r in range(1, rounds + 1):
    ra, rb = (json.load(open(f"{out}/{k}.{r}.json")) for k in ("a", "b"))
    rows.append((ra["prefill_s"], ra["prefill_matmul_s"], rb["prefill_s"], rb["prefill_matmul_s"]))
    print(f"round {r}: prefill {ra['prefill_s']:.3f} s (matmuls {ra['prefill_matmul_s']:.3f}) {a}, "
          f"{rb['prefill_s']:.3f} s (matmuls {rb['prefill_matmul_s']:.3f}) {b}")
ratio = statistics.median(x / z for x, _, z, _ in rows)
matmul_ratio = statistics.median(y / w for _, y, _, w in rows)
print(f"{ranks} rank(s), {dtype} weights, 128-token prompt: prefill {a} / {b} = {ratio:.2f}, "
      f"its matmuls {matmul_ratio:.2f} (medians)")
PY
