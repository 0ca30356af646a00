#!/usr/bin/env bash
# Builds meshnn and runs the main job on its built-in default: the Falcon-7B MLP (hidden 4544,
# intermediate 18176, a generated model, no downloads) tensor-parallel on a 1x2 mesh of 2 ranks,
# checked against the single-device result. Arguments go to the job (see --help), e.g.
#   ./scripts/run.sh --mode dp --batch 2
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh"
"$MESHNN_ROOT/scripts/mpirun.sh" -np 2 "$MESHNN_BUILD/apps/meshnn-mlp" --mesh 1x2 --mode tp --check "$@"
