#!/usr/bin/env bash
# Installs what is missing and builds meshnn (library, apps in build/apps/, tests) in build/.
# Extra arguments go to cmake's configure step, e.g. -DMESHNN_SANITIZE=ON. MESHNN_BUILD_TARGET, when
# set, builds that target alone (default: everything).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$MESHNN_ROOT/scripts/install_deps.sh"
cmake -S "$MESHNN_ROOT" -B "$MESHNN_BUILD" -DCMAKE_BUILD_TYPE="${MESHNN_BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$MESHNN_BUILD" -j "$(meshnn_cores)" ${MESHNN_BUILD_TARGET:+--target "$MESHNN_BUILD_TARGET"}
