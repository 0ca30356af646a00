#include "meshnn/tensor/block_float.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "meshnn/core/error.hpp"
#include "meshnn/core/vector_clones.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

constexpr int kBlockSize = 16;  // one face row shares an exponent
constexpr int kBlocksPerTile = static_cast<int>(kTileVolume) / kBlockSize;

void check_block_dtype(DataType dtype) {
  MESHNN_CHECK(is_block_float(dtype), "block float packing needs dtype bfloat8_b or bfloat4_b, got {}",
               to_string(dtype));
}

// Encodes one value against its block's shared exponent as sign << W | magnitude. Branch-free
// (selects, no early returns): a model load encodes every weight, and the rounding decision of
// random values is a branch mispredicted half the time.
[[gnu::always_inline]] inline uint32_t encode_value(uint32_t bits, uint32_t shared_exp, int w) {
  const uint32_t exp = (bits >> 23) & 0xFFu;
  const uint32_t shift = shared_exp - exp;
  // TT-NN keeps no sticky bit, so bits shifted out here never influence the rounding below.
  const uint32_t full = (1u << 23) | (bits & 0x7FFFFFu);
  // Every condition as a 0/1 or a select of whole words: written so, GCC vectorises a block's loop.
  uint32_t m = full >> std::min(shift, 31u);
  m = shift >= 32 ? 0u : m;
  const int s = 24 - w;
  const uint32_t half = 1u << (s - 1);
  const uint32_t r = m & ((1u << s) - 1);
  m >>= s;
  m += (r > half ? 1u : 0u) | (r == half ? (m & 1u) : 0u);
  // Saturating rather than bumping the exponent keeps the block's exponent shared by all 16.
  m = std::min(m, (1u << w) - 1);
  const uint32_t code = ((bits >> 31) << w) | m;
  const uint32_t zero = ((bits & 0x7FFFFFFFu) == 0 ? 1u : 0u) | (m == 0 ? 1u : 0u);
  return zero != 0 ? 0u : code;
}

// Block `block` of a tile (face row block % 16 of face block / 16) from its 16 values. Loops of
// fixed length over arrays, W a constant: the compiler vectorises them (a model load packs every
// weight).
template <int W>
[[gnu::always_inline]] inline void pack_block(const float* __restrict values, int block, std::byte* __restrict tile) {
  uint32_t bits[kBlockSize];
  std::memcpy(bits, values, sizeof bits);
  // Zero and denormals have exponent field 0 and inf/NaN 255, exactly what the format asks of them.
  uint32_t shared_exp = 0;
  for (int i = 0; i < kBlockSize; ++i) shared_exp = std::max(shared_exp, (bits[i] >> 23) & 0xFFu);
  tile[block] = static_cast<std::byte>(shared_exp);

  uint32_t block_codes[kBlockSize];
  for (int i = 0; i < kBlockSize; ++i) block_codes[i] = encode_value(bits[i], shared_exp, W);
  auto* codes = reinterpret_cast<uint8_t*>(tile + kBlocksPerTile);
  if constexpr (W == 7) {
    for (int i = 0; i < kBlockSize; ++i) codes[block * kBlockSize + i] = static_cast<uint8_t>(block_codes[i]);
  } else {
    for (int i = 0; i < kBlockSize / 2; ++i)
      codes[block * (kBlockSize / 2) + i] = static_cast<uint8_t>(block_codes[2 * i] | (block_codes[2 * i + 1] << 4));
  }
}

void pack_block(const float* values, int block, std::byte* tile, DataType dtype) {
  if (dtype == DataType::BFLOAT8_B) {
    pack_block<7>(values, block, tile);
  } else {
    pack_block<3>(values, block, tile);
  }
}

MESHNN_VECTOR_CLONES void pack_tile(const float* faces, std::byte* tile, DataType dtype) {
  if (dtype == DataType::BFLOAT8_B) {
    for (int block = 0; block < kBlocksPerTile; ++block) pack_block<7>(faces + block * kBlockSize, block, tile);
  } else {
    for (int block = 0; block < kBlocksPerTile; ++block) pack_block<3>(faces + block * kBlockSize, block, tile);
  }
}

// TT-NN's unpacker: the magnitude m shifted up k times until its top bit (of W) is set, that bit
// dropped, the exponent field shared_exp - k (modulo 2^32, as TT-NN's unsigned arithmetic wraps for
// foreign bytes; our encoder always leaves shared_exp >= k), and a zero magnitude gives +-0 (our
// encoder never emits -0, TT-NN decodes it). Branch-free, so that the compiler vectorises a block:
// m converted to float is m normalised, its exponent field 127 + (W - 1) - k and its mantissa the
// bits below the top one, so moving that field by shared_exp - 127 - (W - 1) gives TT-NN's bits.
// A loop of shifts per value had made a bfloat8_b KV cache's attention many times slower than a
// bfloat16 one (docs/performance.md, session 28).
template <int W>
[[gnu::always_inline]] inline void unpack_codes(const uint8_t* __restrict exponents, const uint8_t* __restrict codes,
                                                float* __restrict faces) {
  // The floats written as their bits (a bit_cast per value kept GCC from vectorising the loop).
  using FloatBits = uint32_t __attribute__((may_alias));
  FloatBits* __restrict out = reinterpret_cast<FloatBits*>(faces);
  for (int block = 0; block < kBlocksPerTile; ++block) {
    const uint32_t shift = (exponents[block] - 127u - (W - 1)) << 23;
    const uint8_t* block_codes = codes + block * (W == 7 ? kBlockSize : kBlockSize / 2);  // bytes or nibbles
    FloatBits* block_out = out + block * kBlockSize;
    for (int i = 0; i < kBlockSize; ++i) {
      const uint32_t code = W == 7 ? block_codes[i] : (block_codes[i / 2] >> (i % 2 * 4)) & 0xFu;
      const uint32_t m = code & ((1u << W) - 1), sign = ((code >> W) & 1u) << 31;
      const uint32_t normalised = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(m)));
      const uint32_t nonzero = 0u - static_cast<uint32_t>(m != 0);  // all ones unless m is 0
      block_out[i] = ((normalised + shift) & nonzero) | sign;
    }
  }
}

MESHNN_VECTOR_CLONES void unpack_tile(const std::byte* tile, float* faces, DataType dtype) {
  const auto* exponents = reinterpret_cast<const uint8_t*>(tile);
  if (dtype == DataType::BFLOAT8_B) {
    unpack_codes<7>(exponents, exponents + kBlocksPerTile, faces);
  } else {
    unpack_codes<3>(exponents, exponents + kBlocksPerTile, faces);
  }
}

}  // namespace

void pack_block_float_tile(const float* faces, std::byte* tile, DataType dtype) {
  check_block_dtype(dtype);
  pack_tile(faces, tile, dtype);
}

void pack_block_float_tile_row(const float* values, int row, std::byte* tile, DataType dtype) {
  check_block_dtype(dtype);
  MESHNN_CHECK(row >= 0 && row < 32, "pack_block_float_tile_row: row {} is outside a tile's 32", row);
  // Row r lies in faces r / 16 * 2 (columns 0-15) and r / 16 * 2 + 1 (16-31), face row r % 16.
  for (int half = 0; half < 2; ++half)
    pack_block(values + half * kBlockSize, (row / 16 * 2 + half) * 16 + row % 16, tile, dtype);
}

void unpack_block_float_tile(const std::byte* tile, float* faces, DataType dtype) {
  check_block_dtype(dtype);
  unpack_tile(tile, faces, dtype);
}

void pack_block_float_tiles(const float* faces, std::byte* tiles, int64_t num_tiles, DataType dtype) {
  check_block_dtype(dtype);
  const size_t bytes = tile_bytes(dtype);
  for (int64_t t = 0; t < num_tiles; ++t) pack_tile(faces + t * kTileVolume, tiles + t * bytes, dtype);
}

void unpack_block_float_tiles(const std::byte* tiles, float* faces, int64_t num_tiles, DataType dtype) {
  check_block_dtype(dtype);
  const size_t bytes = tile_bytes(dtype);
  for (int64_t t = 0; t < num_tiles; ++t) unpack_tile(tiles + t * bytes, faces + t * kTileVolume, dtype);
}

}  // namespace meshnn
