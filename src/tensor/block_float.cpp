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

// 16 lanes of 32 bits in GCC's vector extensions: each MESHNN_VECTOR_CLONES build lowers them to its
// own registers (one zmm, two ymm, four xmm). The encoder is written in them rather than left to the
// auto-vectoriser, which turned its selects back into branches and left it scalar: a model load
// packed its weights at 6-7 ns each (docs/performance.md, session 33).
using U32x16 = uint32_t __attribute__((vector_size(64)));
using I32x16 = int32_t __attribute__((vector_size(64)));  // what a lane-wise comparison gives

// GCC warns (at the end of the file, so for the whole file) that these pass vectors wider than the
// default target's registers; they are always inlined into code built for each clone's target, so
// no call passes them.
#pragma GCC diagnostic ignored "-Wpsabi"
// A comparison's lanes (all ones or 0) as unsigned lanes; a lane-wise select on them. Masks and
// selects, not c ? a : b on lanes, which GCC 12 compiled 4-5 times slower here.
[[gnu::always_inline]] inline U32x16 lanes(I32x16 mask) { return reinterpret_cast<const U32x16&>(mask); }
[[gnu::always_inline]] inline U32x16 select(U32x16 mask, U32x16 a, U32x16 b) { return (mask & a) | (~mask & b); }

// Block `block` of a tile (face row block % 16 of face block / 16) from its 16 values: the shared
// exponent is the largest exponent field, and each value becomes sign << W | magnitude, its
// magnitude rounded to W bits against that exponent.
template <int W>
[[gnu::always_inline]] inline void pack_block(const float* __restrict values, int block, std::byte* __restrict tile) {
  U32x16 bits;
  std::memcpy(&bits, values, sizeof bits);
  const U32x16 exp = (bits >> 23) & 0xFFu;
  // Zero and denormals have exponent field 0 and inf/NaN 255, exactly what the format asks of them.
  uint32_t shared_exp = 0;
  for (int i = 0; i < kBlockSize; ++i) shared_exp = std::max(shared_exp, exp[i]);
  tile[block] = static_cast<std::byte>(shared_exp);

  const U32x16 shift = shared_exp - exp;
  // TT-NN keeps no sticky bit, so bits shifted out here never influence the rounding below.
  const U32x16 full = (bits & 0x7FFFFFu) | (1u << 23);
  const U32x16 clamped = select(lanes(shift < 31u), shift, U32x16{} + 31u);
  U32x16 m = (full >> clamped) & lanes(shift < 32u);
  constexpr int s = 24 - W;
  constexpr uint32_t half = 1u << (s - 1);
  const U32x16 r = m & ((1u << s) - 1);
  m >>= s;
  m += (lanes(r > half) | (lanes(r == half) & m)) & 1u;  // to nearest, ties to even
  // Saturating rather than bumping the exponent keeps the block's exponent shared by all 16.
  constexpr uint32_t kMax = (1u << W) - 1;
  m = select(lanes(m < kMax), m, U32x16{} + kMax);
  // Zero, and a magnitude rounded to zero, encode as 0, never as -0.
  const U32x16 nonzero = lanes((bits & 0x7FFFFFFFu) != 0u) & lanes(m != 0u);
  const U32x16 block_codes = (((bits >> 31) << W) | m) & nonzero;

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
