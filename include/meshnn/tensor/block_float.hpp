// bfloat8_b and bfloat4_b: TT-NN's block floating point, bit for bit (docs/spec/formats.md §4).
//
// One tile = 64 shared exponents (one per 16-element face row, faces 0..3 in order) followed by
// the sign+magnitude codes in face order: 1 byte each for bfloat8_b (1088 bytes a tile), two per
// byte for bfloat4_b with the first element in the low nibble (576 bytes a tile).
#pragma once

#include <cstddef>
#include <cstdint>

#include "meshnn/core/types.hpp"

namespace meshnn {

// Magnitude bits per code: 7 for BFLOAT8_B, 3 for BFLOAT4_B.
constexpr int block_float_mantissa_bits(DataType d) { return d == DataType::BFLOAT4_B ? 3 : 7; }

// Packs 1024 float32 values given in *face order* into one tile of `dtype` (BFLOAT8_B/BFLOAT4_B).
void pack_block_float_tile(const float* faces, std::byte* tile, DataType dtype);

// Re-packs row `row` (0..31) of one tile from its 32 values (columns 0..31): the row's two blocks
// (its face rows) only; every other element keeps its bytes. A decode step writes one row of each
// KV cache tile it touches.
void pack_block_float_tile_row(const float* values, int row, std::byte* tile, DataType dtype);

// Unpacks one tile into 1024 float32 values in face order.
void unpack_block_float_tile(const std::byte* tile, float* faces, DataType dtype);

// Whole tensors: `num_tiles` consecutive tiles (face-order float32 <-> packed).
void pack_block_float_tiles(const float* faces, std::byte* tiles, int64_t num_tiles, DataType dtype);
void unpack_block_float_tiles(const std::byte* tiles, float* faces, int64_t num_tiles, DataType dtype);

}  // namespace meshnn
