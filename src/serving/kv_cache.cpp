#include "meshnn/serving/kv_cache.hpp"

#include <cstring>

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

void KvCache::copy_positions(int64_t from, int64_t to, int64_t first, int64_t end) {
  MESHNN_CHECK(from >= 0 && from < slots_ && to >= 0 && to < slots_ && from != to,
               "KV cache copy from slot {} to slot {}: need two different slots of [0, {})", from, to, slots_);
  MESHNN_CHECK(first >= 0 && first <= end && end <= max_seq_,
               "KV cache copy of positions [{}, {}): need 0 <= first <= end <= max_seq = {}", first, end, max_seq_);
  if (first == end) return;
  const Shape shape = layer_shape();
  const int64_t kv_heads = shape[1], tile_cols = round_up_to_tile(shape[3]) / kTileWidth;
  // In a slot's [max_seq, head_dim] matrix of one head, tile rows are stored one after another.
  const size_t tile_row_bytes = static_cast<size_t>(tile_cols) * tile_bytes(dtype_);
  const size_t matrix_bytes = static_cast<size_t>(max_seq_ / kTileHeight) * tile_row_bytes;
  const int64_t first_row = first / kTileHeight, end_row = (end + kTileHeight - 1) / kTileHeight;
  const size_t offset = static_cast<size_t>(first_row) * tile_row_bytes;
  const size_t length = static_cast<size_t>(end_row - first_row) * tile_row_bytes;
  for (std::vector<Tensor>* tensors : {&keys_, &values_})
    for (Tensor& t : *tensors)
      for (int64_t h = 0; h < kv_heads; ++h) {
        std::byte* data = t.bytes().data();
        std::memcpy(data + static_cast<size_t>(to * kv_heads + h) * matrix_bytes + offset,
                    data + static_cast<size_t>(from * kv_heads + h) * matrix_bytes + offset, length);
      }
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const Tensor& t : keys_) total += t.size_bytes();
  for (const Tensor& t : values_) total += t.size_bytes();
  return total;
}

}  // namespace meshnn::serving
