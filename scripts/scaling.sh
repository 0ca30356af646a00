#!/usr/bin/env bash
# Scaling benchmark of either job: the Falcon MLP job (meshnn-mlp, the default) or, with --job llm,
# the LLM job (meshnn-llm). Builds, installs the plotting package if missing, and runs
# scripts/scaling.py (arguments pass through; --help lists them). Results: results/scaling/.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh"
"$MESHNN_ROOT/scripts/install_deps.sh" --plot
exec /usr/bin/python3 "$MESHNN_ROOT/scripts/scaling.py" "$@"
