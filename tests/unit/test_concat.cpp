// concat / slice / pad_to against a plain row-major reference, every dtype and layout.
#include <gtest/gtest.h>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/concat.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::seeded_tensor;

// Reference: slice of row-major float values.
std::vector<float> slice_reference(const std::vector<float>& v, const Shape& s, int dim, int64_t begin, int64_t end) {
  const int64_t outer = s.outer_volume(dim), inner = s.inner_volume(dim), size = s[dim];
  std::vector<float> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = begin; i < end; ++i)
      for (int64_t k = 0; k < inner; ++k) out.push_back(v[static_cast<size_t>((o * size + i) * inner + k)]);
  return out;
}

struct Case {
  DataType dtype;
  Layout layout;
};
const Case kCases[] = {{DataType::FLOAT32, Layout::ROW_MAJOR}, {DataType::FLOAT32, Layout::TILE},
                       {DataType::BFLOAT16, Layout::ROW_MAJOR}, {DataType::BFLOAT16, Layout::TILE},
                       {DataType::BFLOAT8_B, Layout::TILE},     {DataType::BFLOAT4_B, Layout::TILE},
                       {DataType::INT32, Layout::TILE},         {DataType::UINT32, Layout::ROW_MAJOR}};

TEST(Concat, SlicesThenConcatRoundTripsBitForBit) {
  const Shape s{2, 3, 64, 96};
  for (const Case& c : kCases) {
    const Tensor t = seeded_tensor(s, c.dtype, c.layout, 21);
    const std::vector<float> v = t.to_float();
    for (int dim = -4; dim < 4; ++dim) {
      const int d = s.normalize_dim(dim);
      // Tile-aligned pieces for the tiled dims (so block floats stay bit-exact), any cut elsewhere.
      const int64_t cut = d >= 2 ? 32 : 1;
      const Tensor a = slice(t, dim, 0, cut), b = slice(t, dim, cut, s[d]);
      EXPECT_EQ(a.to_float(), slice_reference(v, s, d, 0, cut)) << to_string(c.dtype) << " dim " << dim;
      EXPECT_EQ(b.to_float(), slice_reference(v, s, d, cut, s[d])) << to_string(c.dtype) << " dim " << dim;
      const Tensor parts[] = {a, b};
      const Tensor joined = concat(parts, dim);
      EXPECT_TRUE(testing::bitwise_equal(joined, t)) << to_string(c.dtype) << " dim " << dim;
      if (c.layout == Layout::TILE) {  // whole tiles moved: the bytes themselves are identical
        EXPECT_EQ(std::memcmp(joined.data<std::byte>(), t.data<std::byte>(), t.size_bytes()), 0);
      }
    }
  }
}

TEST(Concat, UnalignedCutsInTiledDimsGoThroughRowMajor) {
  const Shape s{1, 45, 70};
  for (const Case& c : kCases) {
    if (is_block_float(c.dtype)) continue;  // a cut inside a 16-value block re-quantises
    const Tensor t = seeded_tensor(s, c.dtype, c.layout, 4);
    const std::vector<float> v = t.to_float();
    for (int dim : {1, 2}) {
      const Tensor a = slice(t, dim, 0, 13), b = slice(t, dim, 13, s[dim]);
      EXPECT_EQ(b.to_float(), slice_reference(v, s, dim, 13, s[dim]));
      const Tensor parts[] = {a, b};
      EXPECT_TRUE(testing::bitwise_equal(concat(parts, dim), t)) << to_string(c.dtype) << " dim " << dim;
    }
  }
}

TEST(Concat, PadToExtendsWithPadValue) {
  const Tensor t = Tensor::from_float(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, DataType::FLOAT32, Layout::TILE);
  const Tensor p = pad_to(t, 0, 4, -1.0f);
  EXPECT_EQ(p.shape(), (Shape{4, 3}));
  EXPECT_EQ(p.to_float(), (std::vector<float>{1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1, -1}));
  EXPECT_THROW(pad_to(t, 0, 1), Error);
}

TEST(Concat, RejectsMismatchedParts) {
  const Tensor a = seeded_tensor(Shape{2, 32}, DataType::FLOAT32, Layout::TILE, 1);
  const Tensor b = seeded_tensor(Shape{3, 32}, DataType::FLOAT32, Layout::TILE, 1);
  const Tensor c = seeded_tensor(Shape{2, 32}, DataType::BFLOAT16, Layout::TILE, 1);
  const Tensor ab[] = {a, b}, ac[] = {a, c};
  EXPECT_THROW(concat(ab, 1), Error);
  EXPECT_NO_THROW(concat(ab, 0));
  EXPECT_THROW(concat(ac, 0), Error);
  EXPECT_THROW(slice(a, 1, 5, 40), Error);
  EXPECT_THROW(slice(a, 2, 0, 1), Error);
}

}  // namespace
}  // namespace meshnn
