// Storage elements <-> float32 values, in storage order (TILE: tiles in face order; a block-float
// count is whole tiles, 1024 elements each): the one place that knows how each float dtype is
// encoded. Tensors, ops, and the collectives' conversions to their compute type all go through it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meshnn/core/types.hpp"

namespace meshnn {

// dtype: float32, bfloat16 (round to nearest even on encode), bfloat8_b or bfloat4_b (count a
// multiple of 1024). Integer dtypes are not float storage: meshnn::Error.
void decode_storage(const std::byte* storage, DataType dtype, int64_t count, float* values);
void encode_storage(const float* values, DataType dtype, int64_t count, std::byte* storage);

}  // namespace meshnn
