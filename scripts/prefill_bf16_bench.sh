#!/usr/bin/env bash
# The bf16 path end to end: meshnn-llm's prefill of one prompt (TinyLlama shapes by default) with
# bfloat16 activations, bfloat16 products (MESHNN_KERNELS unset: avx512-bf16 where the CPU has it)
# against float32 products (MESHNN_KERNELS=avx512), the two alternating run by run so both see the
# same machine. Prints each run's prefill time and matmul time, and the median speed-ups.
#   scripts/prefill_bf16_bench.sh [ranks (default 2)] [rounds (default 3)] [weight dtype (default bfloat8_b)]
set -euo pipefail
source "$(dirname "$0")/common.sh"
ranks=${1:-2}
rounds=${2:-3}
dtype=${3:-bfloat8_b}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq "$rounds"); do
  for kernels in avx512 avx512-bf16; do
    MESHNN_KERNELS=$kernels MESHNN_NUM_THREADS=1 "$MESHNN_ROOT/scripts/mpirun.sh" -np "$ranks" \
      "$MESHNN_BUILD/apps/meshnn-llm" --mesh "1x$ranks" --mode tp --preset tinyllama --weight-dtype "$dtype" \
      --act-dtype bfloat16 --batch 1 --prompt-len 128 --max-new-tokens 1 --ignore-eos \
      --json "$out/$kernels.$round.json" >/dev/null
  done
done
/usr/bin/python3 - "$out" "$rounds" "$ranks" "$dtype" <<'PY'
import json, statistics, sys
out, rounds, ranks, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = []
for r in range(1, rounds + 1):
    f32, bf16 = (json.load(open(f"{out}/{k}.{r}.json")) for k in ("avx512", "avx512-bf16"))
    rows.append((f32["prefill_s"], f32["prefill_matmul_s"], bf16["prefill_s"], bf16["prefill_matmul_s"]))
    print(f"round {r}: prefill {f32['prefill_s']:.3f} s (matmuls {f32['prefill_matmul_s']:.3f}) with float32 products, "
          f"{bf16['prefill_s']:.3f} s (matmuls {bf16['prefill_matmul_s']:.3f}) with bfloat16 products")
speedup = statistics.median(a / c for a, _, c, _ in rows)
matmul_speedup = statistics.median(b / d for _, b, _, d in rows)
print(f"{ranks} rank(s), {dtype} weights, 128-token prompt: prefill x{speedup:.2f}, its matmuls x{matmul_speedup:.2f} (medians)")
PY
