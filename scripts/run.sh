#!/usr/bin/env bash
# Builds meshnn and runs the main job on its built-in default: Llama inference on a TinyLlama-shaped
# model (22 layers, hidden 2048, 32 heads / 4 KV heads, vocab 32000; generated once, no downloads,
# kept in ~/.cache/meshnn), tensor-parallel on a 1x2 mesh of 2 ranks: a 128-token prompt prefilled,
# 32 tokens decoded with a KV cache. Arguments go to the job (see --help), e.g.
#   ./scripts/run.sh --batch 4 --max-new-tokens 64 --sampling top-p
# The Falcon MLP job: scripts/mpirun.sh -np 2 build/apps/meshnn-mlp --check
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh"
"$MESHNN_ROOT/scripts/mpirun.sh" -np 2 "$MESHNN_BUILD/apps/meshnn-llm" --mesh 1x2 --mode tp "$@"
