// The LLM ops' row kernels (kernels/row_kernels.hpp), every instruction set this CPU runs, against
// float64 math written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "meshnn/kernels/row_kernels.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using kernels::RowKernelSet;

std::vector<const RowKernelSet*> sets_this_cpu_runs() {
  std::vector<const RowKernelSet*> sets{&kernels::portable_row_kernels()};
  if (best_supported_isa() >= Isa::AVX2) sets.push_back(&kernels::avx2_row_kernels());
  if (best_supported_isa() >= Isa::AVX512) sets.push_back(&kernels::avx512_row_kernels());
  return sets;
}

class RowKernels : public ::testing::TestWithParam<const RowKernelSet*> {};

double silu64(double x) { return x / (1.0 + std::exp(-x)); }

TEST_P(RowKernels, SiluMulWithinSixUlpOfFloat64) {
  const RowKernelSet& rk = *GetParam();
  // Gates over the whole range the exponential covers and beyond, with the edge values.
  std::vector<float> gate;
  for (float g = -120.0f; g <= 120.0f; g += 0.0137f) gate.push_back(g);
  for (float g : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, 88.3f, 88.4f, -87.3f, -87.4f, -88.36f, -88.38f, 1e30f, -1e30f})
    gate.push_back(g);
  std::vector<float> up = testing::normal_values(static_cast<int64_t>(gate.size()), 7);
  std::vector<float> out(gate.size());
  rk.silu_mul(gate.data(), up.data(), out.data(), static_cast<int64_t>(gate.size()));
  // e^x within 2 ulp, then 1 + e, the division and the product each round once: 3.5 ulp of the
  // result at most, 6 allowed. Where e^-g overflows (g < -88.37) the kernel gives -0 and the true
  // value is below 1e-36 in magnitude.
  for (size_t i = 0; i < gate.size(); ++i) {
    const double want = silu64(gate[i]) * up[i];
    const double tolerance = std::max(6.0 * std::ldexp(std::abs(want), -24), 1e-35);
    EXPECT_NEAR(out[i], want, tolerance) << "gate " << gate[i] << " up " << up[i];
  }
  // The limits: silu(-inf) = -0 (as apply_activation), silu(+inf) = inf; NaN stays NaN.
  const float inf = std::numeric_limits<float>::infinity();
  const float special[3] = {-inf, inf, std::numeric_limits<float>::quiet_NaN()};
  const float ones[3] = {1.0f, 1.0f, 1.0f};
  float result[3];
  rk.silu_mul(special, ones, result, 3);
  EXPECT_EQ(result[0], 0.0f);
  EXPECT_TRUE(std::signbit(result[0]));
  EXPECT_EQ(result[1], inf);
  EXPECT_TRUE(std::isnan(result[2]));
}

TEST_P(RowKernels, SiluMulMayWriteOverItsGate) {
  const RowKernelSet& rk = *GetParam();
  std::vector<float> gate = testing::normal_values(1000, 3, 4.0f), up = testing::normal_values(1000, 4);
  std::vector<float> apart(gate.size()), in_place = gate;
  rk.silu_mul(gate.data(), up.data(), apart.data(), 1000);
  rk.silu_mul(in_place.data(), up.data(), in_place.data(), 1000);
  EXPECT_EQ(std::memcmp(apart.data(), in_place.data(), apart.size() * sizeof(float)), 0);
}

// `heads` queries over `tiles` tile rows of cached keys and values, each attended over [first,
// last] of its 32 positions, folded by attend_tile; each head against softmax(scale q.k) v over the
// same positions in float64.
struct AttendCase {
  int64_t d;
  std::vector<std::pair<int, int>> ranges;  // [first, last] per tile row
};

void check_attention(const RowKernelSet& rk, const AttendCase& c, int64_t heads, float garbage_outside) {
  const int64_t d = c.d, dp = (d + 31) / 32 * 32, tiles = static_cast<int64_t>(c.ranges.size());
  const std::vector<float> q = testing::normal_values(heads * d, 11);
  std::vector<float> keys = testing::normal_values(tiles * 32 * dp, 12);  // [tiles*32][dp]
  std::vector<float> values = testing::normal_values(tiles * 32 * dp, 13);
  for (int64_t t = 0; t < tiles; ++t)
    for (int j = 0; j < 32; ++j)
      if (j < c.ranges[t].first || j > c.ranges[t].second)
        for (int64_t i = 0; i < dp; ++i) keys[(t * 32 + j) * dp + i] = values[(t * 32 + j) * dp + i] = garbage_outside;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  std::vector<float> acc(heads * d, 0.0f), keys_t(dp * 32);
  std::vector<float> running_max(heads, -std::numeric_limits<float>::infinity()), running_sum(heads, 0.0f);
  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t i = 0; i < dp; ++i)
      for (int j = 0; j < 32; ++j) keys_t[i * 32 + j] = keys[(t * 32 + j) * dp + i];
    rk.attend_tile(q.data(), heads, keys_t.data(), values.data() + t * 32 * dp, d, dp, c.ranges[t].first,
                   c.ranges[t].second, scale, acc.data(), running_max.data(), running_sum.data());
  }

  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> scores, out(d, 0.0);
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < tiles; ++t)
      for (int j = c.ranges[t].first; j <= c.ranges[t].second; ++j) {
        double s = 0;
        for (int64_t i = 0; i < d; ++i) s += double{q[h * d + i]} * keys[(t * 32 + j) * dp + i];
        scores.push_back(s * scale);
        rows.push_back(t * 32 + j);
      }
    const double top = *std::max_element(scores.begin(), scores.end());
    double total = 0;
    for (size_t n = 0; n < scores.size(); ++n) {
      const double w = std::exp(scores[n] - top);
      total += w;
      for (int64_t i = 0; i < d; ++i) out[i] += w * values[rows[n] * dp + i];
    }
    // Scores carry at most gamma_d * sum|q k| * scale of rounding (about 2e-5 for d = 128 here),
    // which moves the weights by as much relatively; the outputs are averages of N(0, 1) values.
    for (int64_t i = 0; i < d; ++i)
      EXPECT_NEAR(acc[h * d + i] / running_sum[h], out[i] / total, 1e-4)
          << "head " << h << " of " << heads << " dim " << i;
  }
}

const std::vector<AttendCase> kCases = {
    {64, {{0, 31}}},                   // one whole tile
    {64, {{0, 31}, {0, 31}, {0, 6}}},  // a decode step at position 70
    {64, {{0, 0}}},                    // the first position alone
    {64, {{5, 5}, {0, 31}, {0, 30}}},  // odd edges of the position pairs
    {128, {{3, 31}, {0, 17}}},         // a sliding window starting inside a tile, Llama 3's head size
    {80, {{0, 31}, {0, 11}}},          // a head size that is no multiple of the vector block
    {17, {{1, 30}}},
};

TEST_P(RowKernels, AttendTileFoldsToSoftmaxAttention) {
  // 1, 3, 5, 8 and 13 heads: whole groups (AVX-512's of 8, then of kLanes / 4) and the rest one
  // by one.
  for (const AttendCase& c : kCases)
    for (int64_t heads : {1, 3, 5, 8, 13}) check_attention(*GetParam(), c, heads, 0.0f);
}

TEST_P(RowKernels, PositionsOutsideTheRangeAreNeverRead) {
  // A cache row past the query's position may hold anything, NaN included (a slot's previous user).
  for (const AttendCase& c : kCases)
    for (int64_t heads : {1, 5, 8}) check_attention(*GetParam(), c, heads, std::numeric_limits<float>::quiet_NaN());
}

TEST_P(RowKernels, TransposeTileMovesEveryElementToItsColumnRun) {
  // Element (r, c) of a tile sits in face (r / 16) * 2 + c / 16 at (r % 16) * 16 + c % 16. The
  // 1024 values are distinct and have 8 significant bits, so the bfloat16 tile (each float's top
  // half) holds them exactly.
  const auto value = [](int r, int c) {
    return std::ldexp(1.0f + static_cast<float>(c % 4 * 32 + r) / 128, c / 4 - 3);
  };
  std::vector<float> tile(1024), out(1024, -1.0f), out_bf16(1024, -1.0f);
  std::vector<uint16_t> tile_bf16(1024);
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 32; ++c) {
      const int index = ((r / 16) * 2 + c / 16) * 256 + (r % 16) * 16 + c % 16;
      tile[index] = value(r, c);
      uint32_t bits;
      std::memcpy(&bits, &tile[index], 4);
      tile_bf16[index] = static_cast<uint16_t>(bits >> 16);
    }
  GetParam()->transpose_tile(tile.data(), out.data());
  GetParam()->transpose_tile_bf16(tile_bf16.data(), out_bf16.data());
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 32; ++c) {
      ASSERT_EQ(out[c * 32 + r], value(r, c)) << "row " << r << " column " << c;
      ASSERT_EQ(out_bf16[c * 32 + r], out[c * 32 + r]) << "bfloat16, row " << r << " column " << c;
    }
}

uint16_t bfloat16_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

TEST_P(RowKernels, AttendTileBf16GivesAttendTilesBitsOnTheSameValues) {
  // The values of a bfloat16 cache read from its tiles (element (r, c) of tile c / 32 in face
  // (r / 16) * 2 + c % 32 / 16 at (r % 16) * 16 + c % 16) against the same values widened to float
  // rows first: every head's output and softmax state bit for bit. Rows outside [first, last] hold
  // NaN in both, and must not be read.
  const RowKernelSet& rk = *GetParam();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const AttendCase& c : kCases)
    for (int64_t heads : {1, 5, 8, 13}) {
      const int64_t d = c.d, dp = (d + 31) / 32 * 32, tiles = static_cast<int64_t>(c.ranges.size());
      const std::vector<float> q = testing::normal_values(heads * d, 21);
      const std::vector<float> keys_t = testing::normal_values(dp * 32, 22);
      std::vector<float> rows = testing::normal_values(tiles * 32 * dp, 23);  // [tiles*32][dp]
      std::vector<uint16_t> value_tiles(static_cast<size_t>(tiles * dp * 32));
      for (int64_t t = 0; t < tiles; ++t)
        for (int j = 0; j < 32; ++j)
          for (int64_t i = 0; i < dp; ++i) {
            float& v = rows[(t * 32 + j) * dp + i];
            if (j < c.ranges[t].first || j > c.ranges[t].second) v = nan;
            const uint16_t bits = bfloat16_bits(v);
            const uint32_t widened = uint32_t{bits} << 16;
            std::memcpy(&v, &widened, 4);  // the float row holds the cached bfloat16 value exactly
            value_tiles[static_cast<size_t>((t * dp / 32 + i / 32) * 1024 + ((j / 16) * 2 + i % 32 / 16) * 256 +
                                            j % 16 * 16 + i % 16)] = bits;
          }
      std::vector<float> acc(heads * d, 0.0f), acc_bf16(heads * d, 0.0f);
      std::vector<float> max(heads, -std::numeric_limits<float>::infinity()), max_bf16 = max;
      std::vector<float> sum(heads, 0.0f), sum_bf16 = sum;
      for (int64_t t = 0; t < tiles; ++t) {
        const auto [first, last] = c.ranges[t];
        rk.attend_tile(q.data(), heads, keys_t.data(), rows.data() + t * 32 * dp, d, dp, first, last, 0.125f,
                       acc.data(), max.data(), sum.data());
        rk.attend_tile_bf16(q.data(), heads, keys_t.data(), value_tiles.data() + t * dp * 32, d, first, last, 0.125f,
                            acc_bf16.data(), max_bf16.data(), sum_bf16.data());
      }
      ASSERT_EQ(std::memcmp(acc.data(), acc_bf16.data(), acc.size() * 4), 0) << "d " << d << ", " << heads << " heads";
      ASSERT_EQ(std::memcmp(max.data(), max_bf16.data(), max.size() * 4), 0);
      ASSERT_EQ(std::memcmp(sum.data(), sum_bf16.data(), sum.size() * 4), 0);
      for (float v : acc) ASSERT_FALSE(std::isnan(v)) << "a row outside the range was read";
    }
}

INSTANTIATE_TEST_SUITE_P(Sets, RowKernels, ::testing::ValuesIn(sets_this_cpu_runs()),
                         [](const ::testing::TestParamInfo<const RowKernelSet*>& info) {
                           return std::string(to_string(info.param->isa));
                         });

TEST(RowKernelChoice, FollowsTheInstructionSetCap) {
  {
    testing::ScopedIsaCap cap(Isa::PORTABLE);
    EXPECT_EQ(kernels::row_kernel_set().isa, Isa::PORTABLE);
  }
  if (best_supported_isa() >= Isa::AVX2) {
    testing::ScopedIsaCap cap(Isa::AVX2);
    EXPECT_EQ(kernels::row_kernel_set().isa, Isa::AVX2);
  }
  if (best_supported_isa() >= Isa::AVX512) {
    EXPECT_EQ(kernels::row_kernel_set().isa, Isa::AVX512);
  }
}

}  // namespace
}  // namespace meshnn
