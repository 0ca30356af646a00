// Attention over a KV cache read in its stored format (internal to src/ops): the core shared by
// attention_with_kv_cache (prefill and decode of the LLM job) and scaled_dot_product_attention_decode.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn::ops_detail {

// Row r of `query_rows` (rows `stride` floats apart, Hq heads of D values from the row's start) is a
// token of cache slot slots[r] at position positions[r]: each head h attends, softmax(scale q k^T)
// v, over positions 0..positions[r] of that slot (only the last `window` of them when window > 0) of k_cache / v_cache ([slots, Hkv, S_max, D],
// TILE, any float dtype) through KV head h / (Hq / Hkv). Online softmax over the cache's tile
// rows, only those up to each row's position decoded; threaded over (run of rows of one slot, KV
// head, share of its query heads). Writes out [rows][Hq * D]. Arguments are validated by the
// callers. Working memory comes from each thread's ScratchScope (core/scratch.hpp).
void attend_over_cache(const float* query_rows, int64_t stride, const Tensor& k_cache, const Tensor& v_cache,
                       std::span<const int64_t> slots, std::span<const int64_t> positions, int64_t hq, float scale,
                       int64_t window, float* out);

}  // namespace meshnn::ops_detail
