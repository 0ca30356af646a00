#include "meshnn/tensor/block_float.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

constexpr int64_t kGoldenTiles = 24;

std::vector<std::byte> read_golden(const std::string& name) {
  const std::string path = std::string(MESHNN_TEST_DATA_DIR) + "/bfp/" + name;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

template <class T>
std::vector<T> read_golden_as(const std::string& name) {
  const std::vector<std::byte> bytes = read_golden(name);
  EXPECT_EQ(bytes.size() % sizeof(T), 0u);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

uint32_t to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

struct GoldenFormat {
  DataType dtype;
  const char* packed;
  const char* decoded;
};

const GoldenFormat kGoldenFormats[] = {
    {DataType::BFLOAT8_B, "bfloat8_b_tiles.bin", "bfloat8_b_decoded_f32_rowmajor_tiles.bin"},
    {DataType::BFLOAT4_B, "bfloat4_b_tiles.bin", "bfloat4_b_decoded_f32_rowmajor_tiles.bin"},
};

TEST(BlockFloat, PackMatchesGoldenBytes) {
  const std::vector<float> input = read_golden_as<float>("input_f32_rowmajor_tiles.bin");
  ASSERT_EQ(input.size(), static_cast<size_t>(kGoldenTiles * kTileVolume));
  for (const GoldenFormat& format : kGoldenFormats) {
    SCOPED_TRACE(to_string(format.dtype));
    const std::vector<std::byte> golden = read_golden(format.packed);
    const size_t bytes = tile_bytes(format.dtype);
    ASSERT_EQ(golden.size(), kGoldenTiles * bytes);

    std::vector<float> faces(input.size());
    for (int64_t t = 0; t < kGoldenTiles; ++t) {
      tile_row_major_to_faces(input.data() + t * kTileVolume, faces.data() + t * kTileVolume);
    }
    for (int64_t t = 0; t < kGoldenTiles; ++t) {
      std::vector<std::byte> packed(bytes);
      pack_block_float_tile(faces.data() + t * kTileVolume, packed.data(), format.dtype);
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(std::to_integer<int>(packed[i]), std::to_integer<int>(golden[t * bytes + i]))
            << "tile " << t << " byte " << i;
      }
    }
    std::vector<std::byte> all(golden.size());
    pack_block_float_tiles(faces.data(), all.data(), kGoldenTiles, format.dtype);
    EXPECT_TRUE(all == golden);
  }
}

TEST(BlockFloat, UnpackMatchesGoldenFloats) {
  for (const GoldenFormat& format : kGoldenFormats) {
    SCOPED_TRACE(to_string(format.dtype));
    const std::vector<std::byte> packed = read_golden(format.packed);
    const std::vector<uint32_t> golden = read_golden_as<uint32_t>(format.decoded);
    ASSERT_EQ(golden.size(), static_cast<size_t>(kGoldenTiles * kTileVolume));

    std::vector<float> faces(golden.size());
    unpack_block_float_tiles(packed.data(), faces.data(), kGoldenTiles, format.dtype);
    for (int64_t t = 0; t < kGoldenTiles; ++t) {
      float row_major[kTileVolume];
      tile_faces_to_row_major(faces.data() + t * kTileVolume, row_major);
      for (int64_t i = 0; i < kTileVolume; ++i) {
        ASSERT_EQ(to_bits(row_major[i]), golden[t * kTileVolume + i]) << "tile " << t << " element " << i;
      }
      // The single-tile form agrees with the whole-tensor form.
      float single[kTileVolume];
      unpack_block_float_tile(packed.data() + t * tile_bytes(format.dtype), single, format.dtype);
      ASSERT_EQ(std::memcmp(single, faces.data() + t * kTileVolume, sizeof single), 0) << "tile " << t;
    }
  }
}

// Helpers for hand-made tiles: a tile of zeros with chosen values in face 0, row 0 (block 0).
std::vector<float> tile_with_block0(std::initializer_list<float> values) {
  std::vector<float> faces(kTileVolume, 0.0f);
  std::copy(values.begin(), values.end(), faces.begin());
  return faces;
}

std::vector<std::byte> pack(const std::vector<float>& faces, DataType dtype) {
  std::vector<std::byte> tile(tile_bytes(dtype));
  pack_block_float_tile(faces.data(), tile.data(), dtype);
  return tile;
}

std::vector<float> unpack(const std::vector<std::byte>& tile, DataType dtype) {
  std::vector<float> faces(kTileVolume);
  unpack_block_float_tile(tile.data(), faces.data(), dtype);
  return faces;
}

int code8(const std::vector<std::byte>& tile, int element) { return std::to_integer<int>(tile[64 + element]); }

TEST(BlockFloat, AllZerosPackToZeroBytes) {
  std::vector<float> faces(kTileVolume, 0.0f);
  for (size_t i = 0; i < faces.size(); i += 3) faces[i] = -0.0f;  // -0 too: its sign is dropped
  for (DataType dtype : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    const std::vector<std::byte> tile = pack(faces, dtype);
    for (std::byte b : tile) ASSERT_EQ(std::to_integer<int>(b), 0);
    for (float v : unpack(tile, dtype)) ASSERT_EQ(to_bits(v), 0u);
  }
}

TEST(BlockFloat, SharedExponentIsTheRowMaximum) {
  std::vector<float> faces(kTileVolume, 0.0f);
  faces[0] = 1.0f;                          // block 0: exponent 127
  faces[16 + 5] = -3.0f;                    // block 1: exponent 128
  faces[256 + 15] = 1e-3f;                  // face 1 row 0 = block 16
  faces[3 * 256 + 15 * 16 + 7] = 65536.0f;  // face 3 row 15 = block 63
  const std::vector<std::byte> tile = pack(faces, DataType::BFLOAT8_B);
  EXPECT_EQ(std::to_integer<int>(tile[0]), 127);
  EXPECT_EQ(std::to_integer<int>(tile[1]), 128);
  EXPECT_EQ(std::to_integer<int>(tile[2]), 0);
  EXPECT_EQ(std::to_integer<int>(tile[16]), static_cast<int>((to_bits(1e-3f) >> 23) & 0xFF));
  EXPECT_EQ(std::to_integer<int>(tile[63]), 127 + 16);
  EXPECT_EQ(code8(tile, 0), 64);                  // 1.0 = 64 * 2^-6
  EXPECT_EQ(code8(tile, 16 + 5), 0x80 | 96);      // -3.0 = -(96 * 2^-5)
  EXPECT_EQ(code8(tile, 3 * 256 + 15 * 16 + 7), 64);
}

TEST(BlockFloat, TiesRoundToEven) {
  // Shared exponent 127 (from 1.0): a bfloat8_b code counts units of 2^-6.
  const std::vector<float> faces = tile_with_block0({
      1.0f,
      1.0f + 1.0f / 128,   // 64.5 -> 64
      1.0f + 3.0f / 128,   // 65.5 -> 66
      33.0f / 64 + 1.0f / 128,  // 33.5 -> 34 (smaller exponent, shifted first)
      1.0f + 1.0f / 128 + 1.0f / 1024,  // just above a tie -> 65
      -(1.0f + 3.0f / 128),  // -65.5 -> -66
  });
  const std::vector<std::byte> tile = pack(faces, DataType::BFLOAT8_B);
  EXPECT_EQ(std::to_integer<int>(tile[0]), 127);
  EXPECT_EQ(code8(tile, 1), 64);
  EXPECT_EQ(code8(tile, 2), 66);
  EXPECT_EQ(code8(tile, 3), 34);
  EXPECT_EQ(code8(tile, 4), 65);
  EXPECT_EQ(code8(tile, 5), 0x80 | 66);
  const std::vector<float> back = unpack(tile, DataType::BFLOAT8_B);
  EXPECT_EQ(back[2], 66.0f / 64);
  EXPECT_EQ(back[5], -66.0f / 64);
}

TEST(BlockFloat, NoStickyBitAfterTheExponentShift) {
  // 0.5 * (1 + 0x20001 * 2^-23): after the one-bit alignment shift the dropped low 1 is forgotten,
  // so the remainder is an exact tie and rounds down to the even 32 (a sticky bit would give 33).
  const float value = from_bits((126u << 23) | 0x020001u);
  const std::vector<std::byte> tile = pack(tile_with_block0({1.0f, value}), DataType::BFLOAT8_B);
  EXPECT_EQ(code8(tile, 1), 32);
}

TEST(BlockFloat, SaturatesInsteadOfGrowingTheExponent) {
  const float almost_two = from_bits(0x3FFFFFFF);
  {
    const std::vector<std::byte> tile = pack(tile_with_block0({1.0f, almost_two, -almost_two}), DataType::BFLOAT8_B);
    EXPECT_EQ(std::to_integer<int>(tile[0]), 127);
    EXPECT_EQ(code8(tile, 1), 0x7F);
    EXPECT_EQ(code8(tile, 2), 0xFF);
    const std::vector<float> back = unpack(tile, DataType::BFLOAT8_B);
    EXPECT_EQ(back[1], 127.0f / 64);
    EXPECT_EQ(back[2], -127.0f / 64);
  }
  {
    const std::vector<std::byte> tile = pack(tile_with_block0({almost_two, -almost_two}), DataType::BFLOAT4_B);
    EXPECT_EQ(std::to_integer<int>(tile[64]), 0xF7);  // codes 7 and 8|7
    const std::vector<float> back = unpack(tile, DataType::BFLOAT4_B);
    EXPECT_EQ(back[0], 1.75f);
    EXPECT_EQ(back[1], -1.75f);
  }
}

TEST(BlockFloat, Bfloat4NibbleOrder) {
  // Shared exponent 127: a bfloat4_b code counts units of 2^-2. Element 0 goes in the low nibble.
  const std::vector<float> faces = tile_with_block0({1.0f, -0.5f, 0.25f, -1.75f});
  std::vector<float> with_face1 = faces;
  with_face1[256] = 0.75f;  // first code of face 1 sits after all 128 bytes of face 0
  const std::vector<std::byte> tile = pack(with_face1, DataType::BFLOAT4_B);
  ASSERT_EQ(tile.size(), 576u);
  EXPECT_EQ(std::to_integer<int>(tile[0]), 127);
  EXPECT_EQ(std::to_integer<int>(tile[64]), 0xA4);      // 4 low, 8|2 high
  EXPECT_EQ(std::to_integer<int>(tile[65]), 0xF1);      // 1 low, 8|7 high
  EXPECT_EQ(std::to_integer<int>(tile[16]), 126);        // face 1 row 0 is block 16
  EXPECT_EQ(std::to_integer<int>(tile[64 + 128]), 0x06);  // 0.75 = 6 * 2^-3 under exponent 126
  const std::vector<float> back = unpack(tile, DataType::BFLOAT4_B);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -0.5f);
  EXPECT_EQ(back[2], 0.25f);
  EXPECT_EQ(back[3], -1.75f);
  EXPECT_EQ(back[256], 0.75f);
}

TEST(BlockFloat, SignDroppedWhenMagnitudeRoundsToZero) {
  const std::vector<std::byte> tile = pack(tile_with_block0({1.0f, -1e-3f, -0.0f}), DataType::BFLOAT8_B);
  EXPECT_EQ(code8(tile, 1), 0);
  EXPECT_EQ(code8(tile, 2), 0);
  const std::vector<float> back = unpack(tile, DataType::BFLOAT8_B);
  EXPECT_EQ(to_bits(back[1]), 0u);
}

TEST(BlockFloat, HugeExponentGapsGiveZero) {
  // A shift of 32 or more must not wrap around (x86 masks shift counts).
  const std::vector<std::byte> tile = pack(tile_with_block0({0x1p100f, 1.0f, 0x1p68f, 0x1p69f}), DataType::BFLOAT8_B);
  EXPECT_EQ(code8(tile, 0), 64);
  EXPECT_EQ(code8(tile, 1), 0);
  EXPECT_EQ(code8(tile, 2), 0);  // gap 32
  EXPECT_EQ(code8(tile, 3), 0);  // gap 31, but still below half a unit
}

TEST(BlockFloat, DenormalsKeepTheirHiddenOne) {
  // Alone in a block a denormal sets exponent 0 and is encoded as if it had a leading one.
  const std::vector<std::byte> tile = pack(tile_with_block0({from_bits(0x00400000), from_bits(0x00000001)}),
                                           DataType::BFLOAT8_B);
  EXPECT_EQ(std::to_integer<int>(tile[0]), 0);
  EXPECT_EQ(code8(tile, 0), 96);
  EXPECT_EQ(code8(tile, 1), 64);
  const std::vector<float> back = unpack(tile, DataType::BFLOAT8_B);
  EXPECT_EQ(to_bits(back[0]), 0x00400000u);
  EXPECT_EQ(to_bits(back[1]), 0u);
}

TEST(BlockFloat, InfinityAndNaNTakeExponent255) {
  const float inf = from_bits(0x7F800000);
  const std::vector<std::byte> tile = pack(tile_with_block0({inf, 1.0f, -inf}), DataType::BFLOAT8_B);
  EXPECT_EQ(std::to_integer<int>(tile[0]), 255);
  EXPECT_EQ(code8(tile, 0), 64);
  EXPECT_EQ(code8(tile, 1), 0);
  const std::vector<float> back = unpack(tile, DataType::BFLOAT8_B);
  EXPECT_EQ(to_bits(back[0]), 0x7F800000u);
  EXPECT_EQ(to_bits(back[2]), 0xFF800000u);

  const std::vector<std::byte> nan_tile = pack(tile_with_block0({from_bits(0x7FC00000)}), DataType::BFLOAT8_B);
  EXPECT_EQ(std::to_integer<int>(nan_tile[0]), 255);
  EXPECT_EQ(to_bits(unpack(nan_tile, DataType::BFLOAT8_B)[0]), 0x7FC00000u);
}

TEST(BlockFloat, SignedZeroCodeDecodesToNegativeZero) {
  // Never produced by pack, but bytes from elsewhere may hold it; TT-NN keeps the sign.
  std::vector<std::byte> tile8(tile_bytes(DataType::BFLOAT8_B));
  tile8[0] = std::byte{130};
  tile8[64] = std::byte{0x80};
  EXPECT_EQ(to_bits(unpack(tile8, DataType::BFLOAT8_B)[0]), 0x80000000u);
  std::vector<std::byte> tile4(tile_bytes(DataType::BFLOAT4_B));
  tile4[64] = std::byte{0x08};
  const std::vector<float> back4 = unpack(tile4, DataType::BFLOAT4_B);
  EXPECT_EQ(to_bits(back4[0]), 0x80000000u);
  EXPECT_EQ(to_bits(back4[1]), 0u);
}

// Every code under every shared exponent, foreign bytes included, against TT-NN's unpacker written
// out step by step: the magnitude shifted up until its top bit is set (k shifts), that bit dropped,
// the exponent field shared_exp - k computed modulo 2^32 as an unsigned int.
uint32_t unpacked_bits(uint32_t code, uint32_t shared_exp, int w) {
  const uint32_t sign = (code >> w) & 1u;
  uint32_t m = code & ((1u << w) - 1);
  if (m == 0) return sign << 31;
  uint32_t k = 0;
  for (; (m & (1u << (w - 1))) == 0; ++k) m <<= 1;
  m &= (1u << (w - 1)) - 1;
  return (sign << 31) | ((shared_exp - k) << 23) | (m << (24 - w));
}

TEST(BlockFloat, UnpackGivesTtnnBitsForEveryCodeAndExponent) {
  for (DataType dtype : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    const int w = dtype == DataType::BFLOAT8_B ? 7 : 3;
    const int codes = 1 << (w + 1);
    std::vector<std::byte> tile(tile_bytes(dtype));
    for (uint32_t e = 0; e < 256; ++e) {
      // Every face row has exponent e; the codes cycle through all values along the tile.
      for (int block = 0; block < 64; ++block) tile[block] = std::byte(static_cast<uint8_t>(e));
      for (int i = 0; i < static_cast<int>(kTileVolume); ++i) {
        const auto code = static_cast<uint8_t>(i % codes);
        if (dtype == DataType::BFLOAT8_B) {
          tile[64 + i] = std::byte{code};
        } else if (i % 2 == 0) {
          tile[64 + i / 2] = std::byte{code};
        } else {
          tile[64 + i / 2] |= std::byte(static_cast<uint8_t>(code << 4));
        }
      }
      const std::vector<float> values = unpack(tile, dtype);
      for (int i = 0; i < static_cast<int>(kTileVolume); ++i)
        ASSERT_EQ(to_bits(values[i]), unpacked_bits(static_cast<uint32_t>(i % codes), e, w))
            << to_string(dtype) << " exponent " << e << " code " << i % codes;
    }
  }
}

// The packer's rule, one value at a time and written out plainly: the shared exponent is the
// block's largest exponent field; the 24-bit significand (hidden one included, also for denormals
// and zeros, which the magnitude test below then drops) moves right by the exponent gap, then by
// 24 - W more with round half to even on exactly the bits dropped there (no sticky bit from the
// gap), saturating at 2^W - 1; a zero magnitude is +0.
uint8_t reference_code(float value, uint32_t shared_exp, int w) {
  const uint32_t bits = to_bits(value);
  const uint32_t gap = shared_exp - ((bits >> 23) & 0xFF);
  if (gap >= 32 || (bits & 0x7FFFFFFF) == 0) return 0;
  const uint32_t significand = (bits & 0x7FFFFF) | 0x800000;
  const uint32_t aligned = significand >> gap;
  const int dropped = 24 - w;
  uint32_t m = aligned >> dropped;
  const uint32_t rest = aligned & ((1u << dropped) - 1), half = 1u << (dropped - 1);
  if (rest > half || (rest == half && (m & 1) != 0)) ++m;
  if (m > (1u << w) - 1) m = (1u << w) - 1;
  if (m == 0) return 0;
  return static_cast<uint8_t>(((bits >> 31) << w) | m);
}

// The packer against reference_code over tiles of random bit patterns (NaN, infinities,
// denormals), exponent gaps of every size, ties and signed zeros: whichever vector build this CPU
// runs (MESHNN_VECTOR_CLONES), every byte must match. (It fails with ties rounded up: tried.)
TEST(BlockFloat, PackMatchesAValueByValueReference) {
  std::mt19937 rng(2024);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, -1e-40f, 1.0f, -3.0f, 1e38f, 0.5f, 0.75f};
  for (DataType dtype : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    const int w = dtype == DataType::BFLOAT8_B ? 7 : 3;
    for (int t = 0; t < 200; ++t) {
      std::vector<float> faces(kTileVolume);
      for (float& x : faces) {
        switch (t % 4) {
          case 0: x = from_bits(static_cast<uint32_t>(rng())); break;
          case 1: x = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), static_cast<int>(rng() % 80) - 60); break;
          case 2: x = (static_cast<float>(static_cast<int>(rng() % 512) - 256) + 0.5f * static_cast<float>(rng() % 2)) / 8.0f; break;
          default: x = rng() % 2 ? specials[rng() % std::size(specials)] : std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20); break;
        }
      }
      std::vector<std::byte> tile(tile_bytes(dtype));
      pack_block_float_tile(faces.data(), tile.data(), dtype);
      for (int block = 0; block < 64; ++block) {
        uint32_t shared = 0;
        for (int i = 0; i < 16; ++i) shared = std::max(shared, (to_bits(faces[block * 16 + i]) >> 23) & 0xFF);
        ASSERT_EQ(static_cast<uint32_t>(tile[block]), shared) << to_string(dtype) << " tile " << t << " block " << block;
        for (int i = 0; i < 16; ++i) {
          const uint8_t expected = reference_code(faces[block * 16 + i], shared, w);
          const auto byte = static_cast<uint8_t>(
              tile[64 + (dtype == DataType::BFLOAT8_B ? block * 16 + i : (block * 16 + i) / 2)]);
          const uint8_t code = dtype == DataType::BFLOAT8_B ? byte : static_cast<uint8_t>((byte >> (i % 2 * 4)) & 0xF);
          ASSERT_EQ(code, expected) << to_string(dtype) << " tile " << t << " block " << block << " value "
                                    << faces[block * 16 + i];
        }
      }
    }
  }
}

// A row re-packed alone gives the bytes of packing the whole tile with that row's new values, for
// rows in both halves of the tile; the other rows' bytes do not change.
TEST(BlockFloat, PackingOneRowEqualsRepackingTheTile) {
  for (DataType dtype : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    std::vector<float> faces(kTileVolume);
    for (int i = 0; i < static_cast<int>(kTileVolume); ++i) faces[i] = std::sin(0.37f * i) * (1 + i % 7);
    std::vector<std::byte> tile(tile_bytes(dtype));
    pack_block_float_tile(faces.data(), tile.data(), dtype);
    for (int row : {0, 5, 16, 31}) {
      float values[32];
      for (int c = 0; c < 32; ++c) {
        values[c] = std::cos(1.3f * c + row) * 100.0f;
        faces[tile_element_index(row, c)] = values[c];
      }
      std::vector<std::byte> expected(tile.size());
      pack_block_float_tile(faces.data(), expected.data(), dtype);
      pack_block_float_tile_row(values, row, tile.data(), dtype);
      EXPECT_EQ(tile, expected) << to_string(dtype) << " row " << row;
    }
  }
  std::vector<std::byte> tile(tile_bytes(DataType::BFLOAT8_B));
  float values[32] = {};
  EXPECT_THROW(pack_block_float_tile_row(values, 32, tile.data(), DataType::BFLOAT8_B), Error);
  EXPECT_THROW(pack_block_float_tile_row(values, 0, tile.data(), DataType::BFLOAT16), Error);
}

TEST(BlockFloat, RejectsNonBlockDtypes) {
  std::vector<float> faces(kTileVolume, 0.0f);
  std::vector<std::byte> tile(4096);
  for (DataType dtype : {DataType::FLOAT32, DataType::BFLOAT16, DataType::INT32, DataType::UINT32}) {
    EXPECT_THROW(pack_block_float_tile(faces.data(), tile.data(), dtype), Error);
    EXPECT_THROW(unpack_block_float_tile(tile.data(), faces.data(), dtype), Error);
    EXPECT_THROW(pack_block_float_tiles(faces.data(), tile.data(), 1, dtype), Error);
    EXPECT_THROW(unpack_block_float_tiles(tile.data(), faces.data(), 1, dtype), Error);
  }
}

}  // namespace
}  // namespace meshnn
