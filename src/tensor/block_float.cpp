#include "meshnn/tensor/block_float.hpp"

#include <algorithm>
#include <cstring>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

constexpr int kBlockSize = 16;  // one face row shares an exponent
constexpr int kBlocksPerTile = static_cast<int>(kTileVolume) / kBlockSize;

void check_block_dtype(DataType dtype) {
  MESHNN_CHECK(is_block_float(dtype), "block float packing needs dtype bfloat8_b or bfloat4_b, got {}",
               to_string(dtype));
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Encodes one value against its block's shared exponent as sign << W | magnitude. Branch-free
// (selects, no early returns): a model load encodes every weight, and the rounding decision of
// random values is a branch mispredicted half the time.
uint8_t encode_value(uint32_t bits, uint32_t shared_exp, int w) {
  const uint32_t exp = (bits >> 23) & 0xFFu;
  const uint32_t shift = shared_exp - exp;
  // TT-NN keeps no sticky bit, so bits shifted out here never influence the rounding below.
  const uint32_t full = (1u << 23) | (bits & 0x7FFFFFu);
  uint32_t m = shift >= 32 ? 0 : full >> (shift & 31u);
  const int s = 24 - w;
  const uint32_t half = 1u << (s - 1);
  const uint32_t r = m & ((1u << s) - 1);
  m >>= s;
  m += (r > half) | ((r == half) & (m & 1u));
  // Saturating rather than bumping the exponent keeps the block's exponent shared by all 16.
  m = std::min(m, (1u << w) - 1);
  const uint32_t code = ((bits >> 31) << w) | m;
  return static_cast<uint8_t>((bits & 0x7FFFFFFFu) == 0 || m == 0 ? 0 : code);
}

float decode_value(uint32_t code, uint32_t shared_exp, int w) {
  uint32_t m = code & ((1u << w) - 1);
  const uint32_t sign = (code >> w) & 1u;
  // Our encoder never emits a signed zero code, but TT-NN decodes one (from foreign bytes) to -0.
  if (m == 0) return bits_float(sign << 31);
  const uint32_t top = 1u << (w - 1);
  uint32_t k = 0;
  while (!(m & top)) {
    m <<= 1;
    ++k;
  }
  m &= top - 1;
  // Codes produced by encoding always leave shared_exp >= k (a denormal ends at exponent 0, e.g. a
  // bfloat4_b magnitude 4 in an all-denormal block decodes to +-0); only foreign bytes can underflow,
  // and those wrap modulo 2^32 exactly as TT-NN's unpacker does.
  return bits_float((sign << 31) | ((shared_exp - k) << 23) | (m << (23 - (w - 1))));
}

void pack_tile(const float* faces, std::byte* tile, DataType dtype) {
  const int w = block_float_mantissa_bits(dtype);
  std::byte* codes = tile + kBlocksPerTile;
  for (int block = 0; block < kBlocksPerTile; ++block) {
    const float* values = faces + block * kBlockSize;
    uint32_t bits[kBlockSize];
    std::memcpy(bits, values, sizeof bits);
    // Zero and denormals have exponent field 0 and inf/NaN 255, exactly what the format asks of them.
    uint32_t shared_exp = 0;
    for (int i = 0; i < kBlockSize; ++i) shared_exp = std::max(shared_exp, (bits[i] >> 23) & 0xFFu);
    tile[block] = static_cast<std::byte>(shared_exp);

    uint8_t block_codes[kBlockSize];
    for (int i = 0; i < kBlockSize; ++i) block_codes[i] = encode_value(bits[i], shared_exp, w);
    if (dtype == DataType::BFLOAT8_B) {
      std::memcpy(codes + block * kBlockSize, block_codes, kBlockSize);
    } else {
      std::byte* out = codes + block * (kBlockSize / 2);
      for (int i = 0; i < kBlockSize / 2; ++i) {
        out[i] = static_cast<std::byte>(block_codes[2 * i] | (block_codes[2 * i + 1] << 4));
      }
    }
  }
}

void unpack_tile(const std::byte* tile, float* faces, DataType dtype) {
  const int w = block_float_mantissa_bits(dtype);
  const std::byte* codes = tile + kBlocksPerTile;
  for (int block = 0; block < kBlocksPerTile; ++block) {
    const uint32_t shared_exp = std::to_integer<uint32_t>(tile[block]);
    float* out = faces + block * kBlockSize;
    if (dtype == DataType::BFLOAT8_B) {
      for (int i = 0; i < kBlockSize; ++i) {
        out[i] = decode_value(std::to_integer<uint32_t>(codes[block * kBlockSize + i]), shared_exp, w);
      }
    } else {
      for (int i = 0; i < kBlockSize / 2; ++i) {
        const uint32_t byte = std::to_integer<uint32_t>(codes[block * (kBlockSize / 2) + i]);
        out[2 * i] = decode_value(byte & 0xFu, shared_exp, w);
        out[2 * i + 1] = decode_value(byte >> 4, shared_exp, w);
      }
    }
  }
}

}  // namespace

void pack_block_float_tile(const float* faces, std::byte* tile, DataType dtype) {
  check_block_dtype(dtype);
  pack_tile(faces, tile, dtype);
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
