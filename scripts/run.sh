#!/usr/bin/env bash
# Builds meshnn and runs the main job on its built-in default: a 1x2 mesh over 2 ranks.
# Arguments after the script name go to the job.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh"
"$MESHNN_ROOT/scripts/mpirun.sh" -np 2 "$MESHNN_BUILD/apps/meshnn-demo" "$@"
