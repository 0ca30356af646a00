#!/usr/bin/env bash
# Fuzzes the command-line parsers, the HDF5 loader's validation layer, the safetensors reader and
# structured output's schema compiler and JSON cursor with libFuzzer for a bounded time each (not
# part of the default test run). The corpora live in tests/fuzz/corpus/ and grow with what the
# fuzzer finds; crashes are written to build-fuzz/findings/.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]    (default 60)
set -euo pipefail
source "$(dirname "$0")/common.sh"
seconds=${1:-60}
"$MESHNN_ROOT/scripts/install_deps.sh" --fuzz
build="$MESHNN_ROOT/build-fuzz"
CC=clang CXX=clang++ cmake -S "$MESHNN_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHNN_FUZZ=ON >/dev/null
cmake --build "$build" -j "$(meshnn_cores)" --target fuzz_options fuzz_hdf5_loader fuzz_safetensors fuzz_json_grammar
mkdir -p "$build/findings"
export ASAN_OPTIONS="detect_leaks=0"  # HDF5 keeps library-lifetime allocations
for target in fuzz_options fuzz_hdf5_loader fuzz_safetensors fuzz_json_grammar; do
  corpus="$MESHNN_ROOT/tests/fuzz/corpus/${target#fuzz_}"
  mkdir -p "$corpus"
  echo "== $target for ${seconds}s (corpus $corpus)"
  "$build/tests/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$build/findings/${target}-" "$corpus"
done
echo "no crashes found"
