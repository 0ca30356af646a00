#!/usr/bin/env bash
# The LLM job end to end, through its files: a tiny Llama checkpoint and ragged prompts written by
# meshnn-make-weights, meshnn-llm in tp, 2d, dp and hybrid on 1, 2 and 4 ranks with more requests than
# slots. Every run's generated ids (dataset /tokens, -1 after a request ended) equal the 1-rank
# run's exactly and its logits agree within 1e-3 (float32 weights, activations and cache); a
# sampled run repeated gives bitwise identical tokens and logits (h5diff, no tolerance).
#   llm_job.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$build/apps/meshnn-make-weights" --model llama --preset tiny --storage float32 --output "$work/tiny.h5" \
  --tokens "$work/prompts.h5" --batch 5 --prompt-len 40 --ragged --max-new-tokens 6 >/dev/null
common=(--weights "$work/tiny.h5" --tokens "$work/prompts.h5" --weight-dtype float32 --act-dtype float32
        --kv-dtype float32 --max-batch 2 --prefill-chunk 24 --save-logits)
run() {  # run NAME RANKS ARGS...
  local name=$1 ranks=$2
  shift 2
  mpirun -np "$ranks" --oversubscribe "$build/apps/meshnn-llm" "${common[@]}" "$@" --output "$work/$name.h5" >/dev/null
}
run single 1 --mesh 1x1
configs=(
  "tp2 2 --mesh 1x2 --mode tp"
  "dp2 2 --mesh 1x2 --mode dp"
  "tp4 4 --mesh 1x4 --mode tp"
  "hybrid4 4 --mesh 2x2 --mode hybrid"
  "2d4 4 --mesh 2x2 --mode 2d"
  "dp4 4 --mesh 2x2 --mode dp"
)
for config in "${configs[@]}"; do
  read -r name ranks rest <<<"$config"
  run "$name" "$ranks" $rest
  if h5diff "$work/single.h5" "$work/$name.h5" /tokens /tokens >/dev/null &&
     h5diff -d 1e-3 "$work/single.h5" "$work/$name.h5" /logits /logits >/dev/null; then
    echo "same tokens and logits as 1 rank: np=$ranks $rest"
  else
    echo "DIFFERENT from 1 rank: np=$ranks $rest"; exit 1
  fi
done
for attempt in a b; do
  run "sampled_$attempt" 2 --mesh 1x2 --sampling top-p --top-p 0.8 --temperature 1.5 --seed 7
done
if h5diff "$work/sampled_a.h5" "$work/sampled_b.h5" /tokens /tokens >/dev/null &&
   h5diff "$work/sampled_a.h5" "$work/sampled_b.h5" /logits /logits >/dev/null; then
  echo "top-p run repeated: bitwise identical tokens and logits"
else
  echo "top-p run repeated: DIFFERENT"; exit 1
fi
echo "all ${#configs[@]} configurations agree with 1 rank; sampling is deterministic"
