#!/usr/bin/env bash
# mpirun with what small machines and root need: `scripts/mpirun.sh -np 4 build/apps/meshnn-demo ...`
# Adds --oversubscribe (more ranks than cores) and root permission; other arguments pass through
# (e.g. --hostfile hostfiles/t3000.txt).
set -euo pipefail
source "$(dirname "$0")/common.sh"
exec mpirun --oversubscribe "$@"
