// meshnn-kernel-bench --attention: one decode step's attention over a KV cache
// (attention_with_kv_cache), the op that grows with the context while a decode step's matmuls do
// not.
#pragma once

#include <string>
#include <vector>

#include "kernel_bench_options.hpp"

namespace meshnn::bench {

// One row per case and --threads count: `users` rows, each of its own cache slot at position
// `positions` (so attending to positions + 1 cached positions), --heads query/KV heads of 64 dims,
// a --kv-dtype cache. Printed: microseconds per call, GFLOP/s of the scores and the weighted sum
// (4 x users x q_heads x attended positions x 64) against the float32 FMA peak of that many cores,
// and the KV cache bytes read per second, all from the best of many calls on warm caches; then
// the median call after the caches were emptied ("cold"), which is what a decode step meets.
// Returns the rows' JSON records.
std::vector<std::string> measure_attention(const BenchOptions& o);

}  // namespace meshnn::bench
