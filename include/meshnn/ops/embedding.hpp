// Token embedding and rotary position embedding (Llama / Hugging Face rotate-half convention).
#pragma once

#include <optional>
#include <span>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// ids: UINT32 tensor of any shape S (any layout); table [V, D] (any float dtype/layout).
// Returns S + [D]: row ids[i] of the table for each id, in `dtype` (default the table's) and
// `layout` (default TILE). Throws meshnn::Error for non-uint32 ids, a table that is not rank 2,
// or an id >= V (naming it).
Tensor embedding(const Tensor& ids, const Tensor& table, std::optional<DataType> dtype = std::nullopt,
                 Layout layout = Layout::TILE);
// The same into `output` (storage kept when large enough; from a ROW_MAJOR table into float32 or
// bfloat16, rows are written one by one and the tile padding is left as the storage held it).
void embedding_into(const Tensor& ids, const Tensor& table, Tensor& output, std::optional<DataType> dtype = std::nullopt,
                    Layout layout = Layout::TILE);

struct RotaryTables {
  Tensor cos, sin;  // float32 ROW_MAJOR [max_positions, head_dim]
};
// HF tables: inv_freq_i = theta^(-2i / D) for i < D/2; angle = p * inv_freq_i (float64, rounded
// once); cos[p] = [cos(angle), cos(angle)] (the half repeated), sin likewise. head_dim even.
RotaryTables make_rotary_tables(int64_t head_dim, int64_t max_positions, double theta = 10000.0);
// The same from given inverse frequencies (D/2 of them, e.g. after a model's rope_scaling):
// angle = p * inverse_frequencies[i], and cos and sin multiplied by `scale` (YaRN's attention
// factor) before their one rounding. Throws meshnn::Error for none, max_positions <= 0, or a scale
// that is not a positive finite number.
RotaryTables make_rotary_tables(std::span<const double> inverse_frequencies, int64_t max_positions,
                                double scale = 1.0);

// Prefill: x [..., S, D]; token s uses position position_offset + s:
//   y = x * cos[p] + rotate_half(x) * sin[p],  rotate_half(x) = [-x[D/2:], x[:D/2]].
// cos/sin: [P, D] tables as above (any float dtype/layout). Throws meshnn::Error when D differs
// from the tables', D is odd, or position_offset + S > P.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t position_offset = 0);

// Decode: x [1, B, H, D] (one token per user); user b is at positions[b] (size B).
Tensor rotary_embedding_decode(const Tensor& x, const Tensor& cos, const Tensor& sin,
                               std::span<const int64_t> positions);

}  // namespace meshnn
