#!/usr/bin/env bash
# Benchmark of the LLM job against the machine's measured limits (read bandwidth, the kernels'
# one-row speed): builds, then runs scripts/llm_bench.py (arguments pass through; --help lists
# them). Results: results/llm_bench/.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/build.sh"
exec /usr/bin/python3 "$MESHNN_ROOT/scripts/llm_bench.py" "$@"
