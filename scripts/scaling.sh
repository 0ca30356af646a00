#!/usr/bin/env bash
# Scaling benchmark of the Falcon MLP job: builds, installs the plotting package if missing, and
# runs scripts/scaling.py (arguments pass through; --help lists them). Results: results/scaling/.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh"
"$MESHNN_ROOT/scripts/install_deps.sh" --plot
exec /usr/bin/python3 "$MESHNN_ROOT/scripts/scaling.py" "$@"
