// KvCache::copy_positions: the copied tile rows of every layer's keys and values, bit for bit, and
// nothing else.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/serving/kv_cache.hpp"

namespace meshnn::serving {
namespace {

// Each element its own value, distinct per layer, keys or values, slot, head, position and column.
void fill(KvCache& cache) {
  const Shape shape = cache.layer_shape();
  const auto volume = static_cast<size_t>(shape.volume());
  for (int64_t l = 0; l < cache.layers(); ++l)
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<float> values(volume);
      for (size_t i = 0; i < volume; ++i)
        values[i] = static_cast<float>((i * 7 + static_cast<size_t>(l) * 131 + static_cast<size_t>(kind) * 17) % 997) / 64.0f - 7.0f;
      (kind == 0 ? cache.keys(l) : cache.values(l)) = Tensor::from_float(values, shape, cache.dtype(), Layout::TILE);
    }
}

// Element (slot, head, position, column) of a layer's keys or values as floats.
std::vector<float> position_row(const Tensor& t, int64_t slot, int64_t head, int64_t position) {
  const Shape s = t.shape();
  const std::vector<float> all = t.to_float();
  const auto start = static_cast<int64_t>(((slot * s[1] + head) * s[2] + position) * s[3]);
  return {all.begin() + start, all.begin() + start + s[3]};
}

TEST(KvCache, CopyPositionsCopiesWholeTileRowsOfOneSlotIntoAnother) {
  for (DataType dtype : {DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::FLOAT32}) {
    SCOPED_TRACE(to_string(dtype));
    // head_dim 40: the tiles' padded columns are copied with the rest.
    KvCache cache(2, 3, 2, 128, 40, dtype);
    fill(cache);
    KvCache before(2, 3, 2, 128, 40, dtype);
    fill(before);
    cache.copy_positions(0, 2, 40, 70);  // tile rows 1 and 2: positions 32-95
    for (int64_t l = 0; l < cache.layers(); ++l)
      for (const auto& [after, was] : {std::pair{&cache.keys(l), &before.keys(l)}, {&cache.values(l), &before.values(l)}})
        for (int64_t slot = 0; slot < 3; ++slot)
          for (int64_t h = 0; h < 2; ++h)
            for (int64_t p = 0; p < 128; ++p) {
              const bool copied = slot == 2 && p >= 32 && p < 96;
              ASSERT_EQ(position_row(*after, slot, h, p), position_row(*was, copied ? 0 : slot, h, p))
                  << "layer " << l << " slot " << slot << " head " << h << " position " << p;
            }
  }
}

TEST(KvCache, CopyPositionsRefusesBadSlotsAndRanges) {
  KvCache cache(1, 2, 1, 64, 32, DataType::BFLOAT16);
  EXPECT_THROW(cache.copy_positions(0, 0, 0, 32), Error);
  EXPECT_THROW(cache.copy_positions(0, 2, 0, 32), Error);
  EXPECT_THROW(cache.copy_positions(-1, 1, 0, 32), Error);
  EXPECT_THROW(cache.copy_positions(0, 1, 10, 5), Error);
  EXPECT_THROW(cache.copy_positions(0, 1, 0, 65), Error);
  EXPECT_NO_THROW(cache.copy_positions(1, 0, 64, 64));  // nothing to copy
}

}  // namespace
}  // namespace meshnn::serving
