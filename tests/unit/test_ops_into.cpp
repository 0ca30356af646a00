// The `_into` forms of the ops a decode step uses: the same bits as the allocating forms (whose
// values the other op tests check against float64), the output's storage kept when it is large
// enough (a smaller row count in the same tiles allocates nothing), and the allowed aliasing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/ops/attention.hpp"
#include "meshnn/ops/eltwise.hpp"
#include "meshnn/ops/embedding.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/ops/normalization.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn {
namespace {

Tensor random_tensor(const Shape& shape, DataType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape.volume()));
  for (float& x : v) x = dist(rng);
  return Tensor::from_float(v, shape, dtype, Layout::TILE);
}

// Logical values and shape equal (the padding of an `_into` output is unspecified).
void expect_same(const Tensor& got, const Tensor& want, const char* what) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(got.to_float(), want.to_float()) << what;
}

TEST(TensorReset, KeepsStorageThatFitsAndGrowsZeroFilled) {
  Tensor t(Shape{1, 1, 32, 64}, DataType::FLOAT32, Layout::TILE);
  const std::byte* storage = t.bytes().data();
  const uint64_t before = buffer_allocations();
  t.reset(Shape{1, 1, 3, 64}, DataType::BFLOAT16, Layout::TILE);  // fewer bytes: same storage
  EXPECT_EQ(t.bytes().data(), storage);
  EXPECT_EQ(t.size_bytes(), size_t{2 * 2048});  // two bfloat16 tiles
  EXPECT_EQ(buffer_allocations(), before);
  t.reset(Shape{1, 1, 33, 64}, DataType::FLOAT32, Layout::TILE);  // two tile rows: a new, zeroed buffer
  EXPECT_EQ(buffer_allocations(), before + 1);
  EXPECT_EQ(t.capacity_bytes(), size_t{4 * 1024 * 4});
  for (float v : t.to_float()) ASSERT_EQ(v, 0.0f);
  EXPECT_THROW(t.reset(Shape{4, 4}, DataType::BFLOAT8_B, Layout::ROW_MAJOR), Error);
}

TEST(OpsInto, MatmulIntoEqualsMatmulAndReusesItsOutput) {
  const Tensor w = random_tensor(Shape{96, 80}, DataType::BFLOAT8_B, 1);
  MatmulOptions o;
  o.output_dtype = DataType::FLOAT32;
  Tensor out;
  // After the first call (the most rows), neither the output nor the scratch grows.
  for (int64_t rows : {32, 5, 2, 1}) {
    const Tensor x = random_tensor(Shape{1, 1, rows, 96}, DataType::BFLOAT16, 10 + static_cast<uint32_t>(rows));
    const uint64_t before = buffer_allocations();
    matmul_into(x, w, out, false, false, o);
    if (rows != 32) {
      EXPECT_EQ(buffer_allocations(), before) << rows << " rows in the first call's tiles";
    }
    expect_same(out, matmul(x, w, false, false, o), "matmul_into");
  }
  const Tensor x = random_tensor(Shape{1, 1, 4, 96}, DataType::BFLOAT16, 3);
  Tensor same = x;
  EXPECT_THROW(matmul_into(same, w, same), Error);
}

// A float32 ROW_MAJOR bias is read in place, any other through its float values: both add the
// same (the bias values are exact in bfloat16), and each row gets it.
TEST(OpsInto, LinearIntoEqualsLinearForEitherBiasForm) {
  const Tensor w = random_tensor(Shape{96, 80}, DataType::BFLOAT8_B, 4);
  const std::vector<float> bias_values = random_tensor(Shape{80}, DataType::BFLOAT16, 5).to_float();
  const Tensor row_major = Tensor::from_float(bias_values, Shape{80}, DataType::FLOAT32, Layout::ROW_MAJOR);
  const Tensor tiled = Tensor::from_float(bias_values, Shape{1, 80}, DataType::BFLOAT16, Layout::TILE);
  MatmulOptions o;
  o.output_dtype = DataType::FLOAT32;
  Tensor out;
  for (int64_t rows : {32, 5, 1}) {
    const Tensor x = random_tensor(Shape{1, 1, rows, 96}, DataType::BFLOAT16, 20 + static_cast<uint32_t>(rows));
    linear_into(x, w, &row_major, Activation::NONE, out, o);
    const Tensor want = linear(x, w, &tiled, Activation::NONE, o);
    expect_same(out, want, "linear_into, float32 ROW_MAJOR bias");
    const std::vector<float> with = out.to_float(), without = matmul(x, w, false, false, o).to_float();
    // with = fl(without + bias): the difference is the bias up to one rounding of the sum.
    for (size_t i = 0; i < with.size(); ++i)
      ASSERT_NEAR(with[i] - without[i], bias_values[i % 80], 1e-6 * (std::abs(with[i]) + 1.0f))
          << rows << " rows, value " << i;
  }
  EXPECT_THROW(linear_into(row_major, w, &row_major, Activation::NONE, out, o), Error);
}

TEST(OpsInto, RowOpsIntoEqualTheirAllocatingForms) {
  const Tensor x = random_tensor(Shape{1, 1, 7, 112}, DataType::BFLOAT16, 4);
  const Tensor y = random_tensor(Shape{1, 1, 7, 112}, DataType::FLOAT32, 5);
  const Tensor g = Tensor::from_float(std::vector<float>(112, 0.5f), Shape{112}, DataType::FLOAT32, Layout::ROW_MAJOR);
  Tensor out = random_tensor(Shape{1, 1, 9, 112}, DataType::BFLOAT16, 6);  // stale contents
  rms_norm_into(x, 1e-5f, &g, out);
  expect_same(out, rms_norm(x, 1e-5f, &g), "rms_norm_into");

  add_into(x, y, out);
  expect_same(out, add(x, y), "add_into");
  Tensor residual = x;  // the residual stream updated in place
  add_into(residual, y, residual);
  expect_same(residual, add(x, y), "add_into in place");

  const Tensor gate_up = random_tensor(Shape{1, 1, 7, 128}, DataType::FLOAT32, 7);
  swiglu_into(gate_up, 64, 50, DataType::BFLOAT16, out);
  expect_same(out, swiglu(gate_up, 64, 50, DataType::BFLOAT16), "swiglu_into");

  const Tensor table = Tensor::from_float(random_tensor(Shape{20, 112}, DataType::FLOAT32, 8).to_float(),
                                          Shape{20, 112}, DataType::BFLOAT16, Layout::ROW_MAJOR);
  const Tensor ids = Tensor::from_uint32(std::vector<uint32_t>{3, 19, 0}, Shape{1, 1, 3}, Layout::ROW_MAJOR);
  embedding_into(ids, table, out, DataType::BFLOAT16, Layout::TILE);
  expect_same(out, embedding(ids, table, DataType::BFLOAT16, Layout::TILE), "embedding_into");
}

TEST(OpsInto, AttentionWithKvCacheIntoEqualsTheAllocatingForm) {
  const int64_t d = 16, hq = 4, hkv = 2;
  const RotaryTables rope = make_rotary_tables(d, 64);
  const QkvColumns columns{0, 64, 96};
  const Tensor qkv = random_tensor(Shape{1, 1, 3, 128}, DataType::BFLOAT16, 9);
  const std::vector<int64_t> slots{0, 1, 1}, positions{4, 7, 8};
  Tensor k1(Shape{2, hkv, 64, d}, DataType::BFLOAT16, Layout::TILE), v1 = k1, k2 = k1, v2 = k1;
  Tensor out = random_tensor(Shape{1, 1, 32, hq * d}, DataType::BFLOAT16, 10);
  attention_with_kv_cache_into(qkv, columns, k1, v1, rope, slots, positions, hq, DataType::BFLOAT16, out);
  const Tensor want = attention_with_kv_cache(qkv, columns, k2, v2, rope, slots, positions, hq, DataType::BFLOAT16);
  expect_same(out, want, "attention_with_kv_cache_into");
  EXPECT_EQ(k1.to_float(), k2.to_float());
  EXPECT_EQ(v1.to_float(), v2.to_float());

  // A sliding window that covers every position in use changes no bit; one that does not, does;
  // a window of 0 is refused.
  Tensor k3 = k1, v3 = k1;
  const Tensor wide = attention_with_kv_cache(qkv, columns, k3, v3, rope, slots, positions, hq, DataType::BFLOAT16,
                                              std::nullopt, 9);
  expect_same(wide, want, "a sliding window over every position");
  Tensor k4 = k1, v4 = k1;
  const Tensor narrow = attention_with_kv_cache(qkv, columns, k4, v4, rope, slots, positions, hq,
                                                DataType::BFLOAT16, std::nullopt, 2);
  EXPECT_NE(narrow.to_float(), want.to_float());
  EXPECT_THROW(attention_with_kv_cache(qkv, columns, k4, v4, rope, slots, positions, hq, DataType::FLOAT32,
                                       std::nullopt, 0),
               Error);
}

}  // namespace
}  // namespace meshnn
