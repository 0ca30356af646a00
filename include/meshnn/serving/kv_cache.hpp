// The KV cache of a decoder on one device: per layer a key and a value tensor
// [slots, kv_heads, max_seq, head_dim] in TILE layout (TT-NN's cache shape), allocated once for the
// whole run. A slot is one user's row of the cache; the batch scheduler hands slots out and the
// attention op (ops/attention.hpp attention_with_kv_cache) writes and reads positions of a slot.
// Model-agnostic: any decoder with per-layer K/V heads uses it.
#pragma once

#include <cstdint>
#include <vector>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn::serving {

class KvCache {
 public:
  KvCache() = default;
  // dtype: float32, bfloat16 or bfloat8_b. max_seq is rounded up to whole tiles (32 positions).
  // Throws meshnn::Error for non-positive sizes or another dtype.
  KvCache(int64_t layers, int64_t slots, int64_t kv_heads, int64_t max_seq, int64_t head_dim, DataType dtype);

  Tensor& keys(int64_t layer) { return keys_.at(static_cast<size_t>(layer)); }
  Tensor& values(int64_t layer) { return values_.at(static_cast<size_t>(layer)); }
  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  int64_t slots() const { return slots_; }
  int64_t max_seq() const { return max_seq_; }
  DataType dtype() const { return dtype_; }
  Shape layer_shape() const;  // [slots, kv_heads, max_seq, head_dim]
  size_t bytes() const;       // storage of every layer's keys and values

  // Copies positions [first, end) of slot `from` to slot `to`, in every layer's keys and values,
  // as stored (no rounding: the bytes of whole tile rows). Positions are copied in runs of 32 (a
  // tile row), so those of the same tile rows outside [first, end) are copied too: the caller
  // treats them as unwritten. Each position's values are stored apart from the other positions'
  // (a bfloat8_b exponent is shared by the 16 values of a face row: one position's), so writing a
  // position afterwards leaves the copied ones as they are. Throws meshnn::Error for slots outside
  // the cache, from == to, or a range outside [0, max_seq).
  void copy_positions(int64_t from, int64_t to, int64_t first, int64_t end);

 private:
  std::vector<Tensor> keys_, values_;
  int64_t slots_ = 0, max_seq_ = 0;
  DataType dtype_ = DataType::BFLOAT16;
};

}  // namespace meshnn::serving
