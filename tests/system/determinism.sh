#!/usr/bin/env bash
# The same job twice gives bitwise identical outputs: runs meshnn-mlp twice per configuration and
# compares the 'output' datasets with h5diff (exact comparison, no tolerance).
#   determinism.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
small=(--hidden 256 --intermediate 1024 --batch 3 --seq 20 --iterations 1 --warmup 0)
configs=(
  "2 --mesh 1x2 --mode tp --tp-variant reduce_scatter --weight-dtype bfloat16"
  "2 --mesh 1x2 --mode tp --tp-variant all_reduce --weight-dtype bfloat8_b --act-dtype float32"
  "4 --mesh 2x2 --mode 2d --weight-dtype bfloat16"
  "4 --mesh 2x2 --mode hybrid --weight-dtype bfloat4_b"
  "4 --mesh 1x4 --mode dp --weight-dtype float32 --act-dtype float32"
)
i=0
for config in "${configs[@]}"; do
  read -r ranks rest <<<"$config"
  for run in a b; do
    mpirun -np "$ranks" --oversubscribe "$build/apps/meshnn-mlp" $rest "${small[@]}" \
      --output "$work/out_${i}_$run.h5" >/dev/null
  done
  if h5diff "$work/out_${i}_a.h5" "$work/out_${i}_b.h5" /output /output >/dev/null; then
    echo "identical: np=$ranks $rest"
  else
    echo "DIFFERENT: np=$ranks $rest"; exit 1
  fi
  i=$((i + 1))
done
echo "all ${#configs[@]} configurations bitwise identical across runs"
