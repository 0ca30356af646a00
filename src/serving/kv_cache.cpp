#include "meshnn/serving/kv_cache.hpp"

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::serving {

KvCache::KvCache(int64_t layers, int64_t slots, int64_t kv_heads, int64_t max_seq, int64_t head_dim, DataType dtype)
    : slots_(slots), max_seq_(round_up_to_tile(max_seq)), dtype_(dtype) {
  MESHNN_CHECK(layers > 0 && slots > 0 && kv_heads > 0 && max_seq > 0 && head_dim > 0,
               "KV cache sizes must be > 0: layers {}, slots {}, kv_heads {}, max_seq {}, head_dim {}", layers, slots,
               kv_heads, max_seq, head_dim);
  MESHNN_CHECK(dtype == DataType::FLOAT32 || dtype == DataType::BFLOAT16 || dtype == DataType::BFLOAT8_B,
               "KV cache dtype must be float32, bfloat16 or bfloat8_b, got {}", to_string(dtype));
  const Shape shape{slots, kv_heads, max_seq_, head_dim};
  for (int64_t l = 0; l < layers; ++l) {
    keys_.emplace_back(shape, dtype, Layout::TILE);
    values_.emplace_back(shape, dtype, Layout::TILE);
  }
}

Shape KvCache::layer_shape() const { return keys_.empty() ? Shape{} : keys_.front().shape(); }

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const Tensor& t : keys_) total += t.size_bytes();
  for (const Tensor& t : values_) total += t.size_bytes();
  return total;
}

}  // namespace meshnn::serving
