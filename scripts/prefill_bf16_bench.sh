#!/usr/bin/env bash
# The bf16 path end to end: the LLM job's prefill with float32 products against bfloat16 products
# (scripts/prefill_compare.sh f32-products bf16-products); the ratio printed is the speed-up.
#   scripts/prefill_bf16_bench.sh [ranks (default 2)] [rounds (default 3)] [weight dtype (default bfloat8_b)]
exec "$(dirname "$0")/prefill_compare.sh" f32-products bf16-products "$@"
