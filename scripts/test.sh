#!/usr/bin/env bash
# Builds meshnn and runs the whole test suite (unit tests, and MPI tests at 1-8 ranks) with ctest.
# Extra arguments go to ctest (e.g. -R Ccl, -L unit).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh"
cd "$MESHNN_BUILD"
ctest --output-on-failure --timeout 600 -j "$(meshnn_cores)" "$@"
