#!/usr/bin/env bash
# Measures meshnn-convert on generated TinyLlama-sized checkpoints (22 layers, hidden 2048,
# intermediate 5632, 32 heads / 4 KV heads, vocab 32000): MB/s of checkpoint read and peak
# resident memory (/usr/bin/time's maximum RSS), for
#   a BF16 checkpoint in one file (2.2 GB): kept as stored, and converted to float32;
#   an F32 checkpoint in 3 shards (4.4 GB): kept as stored, and converted to bfloat16.
# The checkpoints are written by tests/io/hf_model_dir.py into WORK_DIR (default: a new directory
# under /tmp, about 11 GB at most while it runs) and deleted at the end. The inputs are read from
# the page cache (they were just written); outputs go to the page cache and the disk behind it.
#   scripts/convert_bench.sh [WORK_DIR]     (MESHNN_BUILD selects the build, default build/)
set -euo pipefail
source "$(dirname "$0")/common.sh"
convert="$MESHNN_BUILD/apps/meshnn-convert"
[ -x "$convert" ] || { echo "no $convert; build first (scripts/build.sh)" >&2; exit 1; }
work="${1:-$(mktemp -d /tmp/meshnn-convert-bench.XXXXXX)}"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
make_model() { /usr/bin/python3 "$MESHNN_ROOT/tests/io/hf_model_dir.py" --preset tinyllama "$@" >/dev/null; }

run() {  # label, model dir, convert options...
  local label=$1 dir=$2
  shift 2
  local out="$work/out.h5" times="$work/time.txt"
  for i in 1 2 3; do
    rm -f "$out"
    /usr/bin/time -f "%e %M" -o "$times" "$convert" --quiet "$@" "$dir" "$out"
    local mb
    mb=$(du -cb "$dir"/*.safetensors | tail -1 | awk '{printf "%.1f", $1 / 1e6}')
    read -r seconds kib <"$times"
    awk -v l="$label" -v i="$i" -v mb="$mb" -v s="$seconds" -v k="$kib" \
      'BEGIN { printf "%-34s run %d: %7.1f MB in %6.2f s = %7.1f MB/s, peak RSS %6.1f MiB\n", l, i, mb, s, mb / s, k / 1024 }'
  done
  rm -f "$out"
}

make_model --dtype BF16 --out "$work/bf16"
run "BF16, 1 file, kept" "$work/bf16"
run "BF16, 1 file, --dtype float32" "$work/bf16" --dtype float32
rm -rf "$work/bf16"
make_model --dtype F32 --shards 3 --out "$work/f32"
run "F32, 3 shards, kept" "$work/f32"
run "F32, 3 shards, --dtype bfloat16" "$work/f32" --dtype bfloat16
