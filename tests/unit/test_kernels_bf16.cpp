// The bf16 path of matmul (bfloat16 products, float32 accumulation): the emulated instructions
// (vdpbf16ps, AMX's tdpbf16ps) against the hardware's bits, and the path (emulated everywhere,
// hardware where the CPU has AVX512-BF16 or AMX) against an independent float64 reference.
//
// Tolerances. Every product of two bfloat16 values is exact in float32, so the only rounding is
// in the K float32 additions (any order): against the float64 product of the values the kernel
// was given (A rounded to bfloat16, B decoded), |C - C64| <= K u sum_k |a_k b_k| with u = 2^-24
// (gamma_K), plus K * 2^-126 for denormal partial sums flushed to zero. Against the float64
// product of the original float activations, rounding A to bfloat16 adds at most
// 2^-8 sum_k |a_k b_k| (relative error of round-to-nearest bfloat16: half of 2^-7).
//
// Decode rows (at most 6) on block-float weights take a kernel of their own. Up to 2 rows it
// multiplies A by w' = +-(1 + m/128) 2^(E-127) and by +-2^(E-127) and doubles the difference. Its two sums of products are bounded by 2 s and s per term,
// s = 2^(E-127) <= the largest |b| of the term's block (the block's largest magnitude is at least
// 64 of 127), so |C - C64| <= 2 * gamma_K * 3 sum_k |a_k| s_k, plus the denormal flushes. From 3
// rows it multiplies a_k 2^(E-133) (bfloat4_b: 2^(E-129)) by the integer +-m: exact products in
// one sum, within gamma_K sum_k |a_k b_k|, which the bound above covers.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "meshnn/core/thread_pool.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/tensor/tensor.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using kernels::dpbf16_lane;
using kernels::Isa;

float from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

uint16_t bf16(float x) { return static_cast<uint16_t>(bits_of(x) >> 16); }  // for exact bfloat16 values

bool hardware_has_bf16() { return kernels::best_supported_isa() >= Isa::AVX512_BF16; }
bool hardware_has_amx() { return kernels::best_supported_isa() >= Isa::AMX_BF16; }

// 16 lanes of vdpbf16ps on the hardware.
__attribute__((target("avx512bf16,avx512f"))) void hardware_dpbf16(const float* acc, const uint32_t* a,
                                                                    const uint32_t* b, float* out) {
  const __m512 r = _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(a),
                                    (__m512bh)_mm512_loadu_si512(b));
  _mm512_storeu_ps(out, r);
}

TEST(Bf16Lane, OddProductsGoFirstEachRoundedOnce) {
  // acc = 1, odd product 2^24, even product 1: odd first gives (1 + 2^24) -> 2^24 (tie to even),
  // then + 1 -> 2^24 again; even first would give 2 + 2^24 exactly.
  const uint32_t a = kernels::bf16_pair(bf16(1.0f), bf16(16777216.0f));
  const uint32_t b = kernels::bf16_pair(bf16(1.0f), bf16(1.0f));
  EXPECT_EQ(dpbf16_lane(1.0f, a, b), 16777216.0f);
  // One product, one rounding: 3 * 3 = 9 exactly, 1 + 9 = 10.
  EXPECT_EQ(dpbf16_lane(1.0f, kernels::bf16_pair(bf16(3.0f), 0), kernels::bf16_pair(bf16(3.0f), 0)), 10.0f);
}

TEST(Bf16Lane, DenormalsAreZeroInAndOut) {
  const float tiny = std::ldexp(1.0f, -130);  // a float32 denormal whose top half is a bfloat16 denormal
  const uint32_t one = kernels::bf16_pair(bf16(1.0f), 0);
  // A denormal accumulator counts as zero.
  EXPECT_EQ(bits_of(dpbf16_lane(tiny, 0, 0)), 0u);
  // A denormal bfloat16 operand counts as zero: 1 * tiny + 0 = 0.
  EXPECT_EQ(dpbf16_lane(0.0f, one, kernels::bf16_pair(bf16(tiny), 0)), 0.0f);
  // A denormal result is flushed, keeping its sign: 2^-70 * -2^-70 = -2^-140.
  const uint32_t p = kernels::bf16_pair(bf16(std::ldexp(1.0f, -70)), 0);
  const uint32_t q = kernels::bf16_pair(bf16(-std::ldexp(1.0f, -70)), 0);
  const float r = dpbf16_lane(0.0f, p, q);
  EXPECT_EQ(r, 0.0f);
  EXPECT_TRUE(std::signbit(r));
}

TEST(Bf16Lane, EmulationMatchesTheInstructionBitForBit) {
  if (!hardware_has_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16; the emulation's rules are tested above";
  std::mt19937 rng(20);
  // Exponents spread over the whole range, so products and sums underflow, overflow and cancel.
  auto any_bf16 = [&] {
    const uint32_t sign = rng() & 1, exponent = rng() % 256, mantissa = rng() & 0x7F;
    return static_cast<uint16_t>(sign << 15 | exponent << 7 | mantissa);
  };
  auto near_one = [&] {
    std::normal_distribution<float> d(0.0f, 1.0f);
    return bf16(from_bits(bits_of(d(rng)) & 0xFFFF0000u));
  };
  int64_t compared = 0, mismatched = 0;
  for (int round = 0; round < 20000; ++round) {
    float acc[16], out[16];
    uint32_t a[16], b[16];
    for (int i = 0; i < 16; ++i) {
      const bool wide = round % 2 == 0;
      a[i] = kernels::bf16_pair(wide ? any_bf16() : near_one(), wide ? any_bf16() : near_one());
      b[i] = kernels::bf16_pair(wide ? any_bf16() : near_one(), wide ? any_bf16() : near_one());
      acc[i] = wide ? from_bits(static_cast<uint32_t>(rng())) : std::ldexp(static_cast<float>(rng() % 1000), -5);
    }
    // The rounding cases of the test above, and a denormal accumulator.
    acc[0] = 1.0f;
    a[0] = kernels::bf16_pair(bf16(1.0f), bf16(16777216.0f));
    b[0] = kernels::bf16_pair(bf16(1.0f), bf16(1.0f));
    acc[1] = std::ldexp(1.0f, -130);
    hardware_dpbf16(acc, a, b, out);
    for (int i = 0; i < 16; ++i) {
      const float want = out[i], got = dpbf16_lane(acc[i], a[i], b[i]);
      ++compared;
      // NaN payloads are not specified; a NaN must meet a NaN.
      if (std::isnan(want) && std::isnan(got)) continue;
      if (bits_of(want) != bits_of(got)) {
        if (++mismatched <= 5)
          ADD_FAILURE() << std::hexfloat << "acc " << acc[i] << " a 0x" << std::hex << a[i] << " b 0x" << b[i]
                        << ": hardware " << want << ", emulation " << got;
      }
    }
  }
  EXPECT_EQ(mismatched, 0) << "of " << compared << " lanes";
}

// One row of tdpbf16ps: B's rows of one pair per column (b_stride 1 with one column).
float tdp_one_column(float c, const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  kernels::tdpbf16ps_row(&c, 1, a.data(), static_cast<int>(a.size()), b.data(), 1);
  return c;
}

TEST(AmxTdpLane, EvenAndOddProductsSumInTwoChainsThenIntoC) {
  using kernels::bf16_pair;
  const uint16_t one = bf16(1.0f), big = bf16(16777216.0f);
  // Even products 2^24, 1, 1 and odd products 0, 1, 1. Two chains: 2^24 + 1 + 1 -> 2^24 (each 1 is
  // a tie, rounded to even), 0 + 1 + 1 = 2, then 2^24 + 2 exactly. One chain through both (as
  // vdpbf16ps accumulates) would lose every 1: 2^24.
  const std::vector<uint32_t> a{bf16_pair(big, 0), bf16_pair(one, one), bf16_pair(one, one)};
  const std::vector<uint32_t> b{bf16_pair(one, one), bf16_pair(one, one), bf16_pair(one, one)};
  EXPECT_EQ(tdp_one_column(0.0f, a, b), 16777218.0f);
  // C is added last: C = 2^24, even chain 1, odd chain 1 -> 2^24 + 2; added into C one at a time,
  // each 1 would be lost.
  EXPECT_EQ(tdp_one_column(16777216.0f, {bf16_pair(one, one)}, {bf16_pair(one, one)}), 16777218.0f);
}

TEST(AmxTdpLane, DenormalsAreZeroInAndOut) {
  using kernels::bf16_pair;
  const float tiny = std::ldexp(1.0f, -130);
  // A denormal C counts as zero.
  EXPECT_EQ(bits_of(tdp_one_column(tiny, {0}, {0})), 0u);
  // A denormal operand counts as zero.
  EXPECT_EQ(tdp_one_column(0.0f, {bf16_pair(bf16(1.0f), 0)}, {bf16_pair(bf16(tiny), 0)}), 0.0f);
  // A denormal product is flushed before the chains meet: 2^-70 * 2^-70 + 1 = 1, and alone 0.
  const uint16_t small = bf16(std::ldexp(1.0f, -70));
  EXPECT_EQ(tdp_one_column(0.0f, {bf16_pair(small, 0)}, {bf16_pair(small, 0)}), 0.0f);
}

using testing::normal_values;

using IsaCap = testing::ScopedIsaCap;
using Bf16Emulation = MatmulOptions::Bf16Emulation;

// The bf16 paths this machine runs: the emulations everywhere, the hardware where it exists.
struct Bf16Path {
  const char* name;
  Bf16Emulation emulation;
  Isa isa;                   // a hardware path's instruction set (the cap while it runs)
  const char* small_m_name;  // the path's decode rows (at most 6) on bfloat8_b and bfloat4_b
};

const Bf16Path kVdpEmulated{"bf16-emulated", Bf16Emulation::VDPBF16PS, Isa::PORTABLE, "bf16-emulated"};
const Bf16Path kAmxEmulated{"amx-emulated", Bf16Emulation::TDPBF16PS, Isa::PORTABLE, "bf16-emulated"};
const Bf16Path kAvx512Bf16{"avx512-bf16", Bf16Emulation::NONE, Isa::AVX512_BF16, "avx512-bf16"};
const Bf16Path kAmxBf16{"amx-bf16", Bf16Emulation::NONE, Isa::AMX_BF16, "avx512-bf16"};

void PrintTo(const Bf16Path& path, std::ostream* os) { *os << path.name; }

std::vector<Bf16Path> bf16_paths() {
  std::vector<Bf16Path> out{kVdpEmulated, kAmxEmulated};
  if (hardware_has_bf16()) out.push_back(kAvx512Bf16);
  if (hardware_has_amx()) out.push_back(kAmxBf16);
  return out;
}

MatmulOptions options_for(const Bf16Path& path, ThreadPool* pool = nullptr) {
  MatmulOptions o;
  o.emulate_bf16 = path.emulation;
  o.output_dtype = DataType::FLOAT32;
  o.pool = pool;
  return o;
}

// A hardware path runs with the instruction-set cap at its level (avx512-bf16 on an AMX machine);
// an emulation does not depend on the cap.
std::vector<float> product(const Bf16Path& path, const Tensor& a, const Tensor& b, ThreadPool* pool = nullptr) {
  std::optional<IsaCap> cap;
  if (path.emulation == Bf16Emulation::NONE) cap.emplace(path.isa);
  return matmul(a, b, false, false, options_for(path, pool)).to_float();
}

const char* kernel_path(const Bf16Path& path, DataType weight, int64_t rows) {
  std::optional<IsaCap> cap;
  if (path.emulation == Bf16Emulation::NONE) cap.emplace(path.isa);
  return matmul_kernel_path(DataType::BFLOAT16, weight, rows, false, options_for(path));
}

// a [batches_a..., M, K] x b [batches_b..., K, N] with numpy broadcasting of one leading dim pair
// (shapes of rank 2 or 3 here), in float64 from the given values.
struct Product {
  std::vector<double> c, abs_sum;
};

Product float64_matmul(const std::vector<float>& a, const Shape& as, const std::vector<float>& b, const Shape& bs) {
  const int64_t M = as[-2], K = as[-1], N = bs[-1];
  const int64_t ba = as.rank() == 3 ? as[0] : 1, bb = bs.rank() == 3 ? bs[0] : 1, batches = std::max(ba, bb);
  Product p;
  p.c.assign(static_cast<size_t>(batches * M * N), 0.0);
  p.abs_sum.assign(p.c.size(), 0.0);
  for (int64_t t = 0; t < batches; ++t)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, sa = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = a[((ba == 1 ? 0 : t) * M + m) * K + k], y = b[((bb == 1 ? 0 : t) * K + k) * N + n];
          s += x * y;
          sa += std::fabs(x * y);
        }
        p.c[(t * M + m) * N + n] = s;
        p.abs_sum[(t * M + m) * N + n] = sa;
      }
  return p;
}

struct Case {
  std::vector<int64_t> a, b;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{7, 33}, {33, 31}},           // the fewest rows the path takes on block floats (5 on the others); one padded tile
      {{7, 100}, {100, 65}},         // rows not a multiple of the micro-kernel's
      {{37, 300}, {300, 129}},       // K over one K block (256), odd K (a pair straddles the padding)
      {{29, 47}, {47, 96}},          // odd K inside one tile
      {{2, 17, 40}, {40, 50}},       // batched a, one b (rows folded)
      {{19, 40}, {3, 40, 35}},       // one a, batched b
      {{3, 7, 64}, {3, 64, 33}},     // both batched
      {{530, 70}, {70, 40}},         // more rows than one A block (480)
      {{40, 1100}, {1100, 70}},      // K over the bf16 K block (512): later blocks add into C
  };
  return all;
}

void check_against_float64(const Bf16Path& path, const Case& cs, DataType weight, uint32_t seed, ThreadPool* pool) {
  const Shape as(cs.a), bs(cs.b);
  const std::vector<float> a0 = normal_values(as.volume(), seed), b0 = normal_values(bs.volume(), seed + 1, 0.5f);
  const Tensor a = Tensor::from_float(a0, as, DataType::BFLOAT16, Layout::TILE);
  const Tensor b = Tensor::from_float(b0, bs, weight, Layout::TILE);
  const int64_t rows = as[-2] * (bs.rank() == 2 && as.rank() == 3 ? as[0] : 1);
  ASSERT_STREQ(kernel_path(path, weight, rows), path.name);
  const std::vector<float> got = product(path, a, b, pool);

  const std::vector<float> bq = b.to_float();
  const Product given = float64_matmul(a.to_float(), as, bq, bs);  // what the kernel was handed
  const Product original = float64_matmul(a0, as, bq, bs);         // before A was rounded
  const int64_t K = as[-1];
  const double gamma = static_cast<double>(K) * std::ldexp(1.0, -24), flushed = K * std::ldexp(1.0, -126);
  ASSERT_EQ(got.size(), given.c.size());
  int64_t bad_given = 0, bad_original = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = gamma * given.abs_sum[i] + flushed;
    worst = std::max(worst, std::fabs(got[i] - given.c[i]) / tol);
    if (std::fabs(got[i] - given.c[i]) > tol) ++bad_given;
    if (std::fabs(got[i] - original.c[i]) > gamma * original.abs_sum[i] + std::ldexp(original.abs_sum[i], -8) + flushed)
      ++bad_original;
  }
  EXPECT_EQ(bad_given, 0) << "worst error / tolerance " << worst;
  EXPECT_EQ(bad_original, 0);
}

class Bf16MatmulPath : public ::testing::TestWithParam<Bf16Path> {};

// Decode shapes: 1 to 6 rows (also folded from a batch), odd K and N with padded tiles.
const std::vector<Case>& decode_cases() {
  static const std::vector<Case> all = {
      {{1, 300}, {300, 97}},    {{2, 64}, {64, 64}},   {{3, 45}, {45, 130}}, {{4, 1000}, {1000, 40}},
      {{2, 1, 100}, {100, 33}}, {{5, 200}, {200, 70}}, {{6, 64}, {64, 96}},  {{3, 2, 70}, {70, 50}},
  };
  return all;
}

TEST_P(Bf16MatmulPath, DecodeRowsOnBlockFloatMatchFloat64) {
  uint32_t seed = 800;
  for (DataType weight : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    for (const Case& cs : decode_cases()) {
      const Shape as(cs.a), bs(cs.b);
      SCOPED_TRACE(::testing::Message() << as.to_string() << " x " << bs.to_string() << " " << to_string(weight));
      const Tensor a = Tensor::from_float(normal_values(as.volume(), seed), as, DataType::BFLOAT16, Layout::TILE);
      // Rows of B at scales 2^-6 .. 2^6, so blocks of very different exponents meet in one sum.
      std::vector<float> b0 = normal_values(bs.volume(), seed + 1, 0.5f);
      for (int64_t k = 0; k < bs[0]; ++k)
        for (int64_t n = 0; n < bs[1]; ++n)
          b0[k * bs[1] + n] = std::ldexp(b0[k * bs[1] + n], static_cast<int>(k % 13) - 6);
      ++seed;
      const Tensor b = Tensor::from_float(b0, bs, weight, Layout::TILE);
      const int64_t rows = as.volume() / as[-1];
      // bfloat4_b's decode rows need VBMI: a CPU with AVX512-BF16 and without it (Cooper Lake)
      // takes the float32 kernel for them.
      if (weight == DataType::BFLOAT4_B && GetParam().emulation == Bf16Emulation::NONE &&
          !kernels::avx512_bf16_kernel_set().small_m_bf16_bfloat4)
        continue;
      ASSERT_STREQ(kernel_path(GetParam(), weight, rows), GetParam().small_m_name);
      const std::vector<float> got = product(GetParam(), a, b);
      const std::vector<float> av = a.to_float(), bq = b.to_float();
      const Product given = float64_matmul(av, as, bq, bs);
      const int64_t K = as[-1], N = bs[-1];
      const double gamma = static_cast<double>(K) * std::ldexp(1.0, -24), flushed = 2 * K * std::ldexp(1.0, -126);
      ASSERT_EQ(got.size(), given.c.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < N; ++n) {
          double bound = 0;  // sum_k |a_k| s_k, s_k the largest |b| of the 16-column block holding n
          for (int64_t k = 0; k < K; ++k) {
            double s = 0;
            for (int64_t j = n / 16 * 16; j < std::min(N, n / 16 * 16 + 16); ++j)
              s = std::max(s, std::fabs(double{bq[k * N + j]}));
            bound += std::fabs(double{av[r * K + k]}) * s;
          }
          const size_t i = static_cast<size_t>(r * N + n);
          EXPECT_LE(std::fabs(got[i] - given.c[i]), 6 * gamma * bound + flushed) << "row " << r << " column " << n;
        }
    }
  }
}

TEST_P(Bf16MatmulPath, EveryWeightDtypeOddShapesMatchFloat64) {
  uint32_t seed = 700;
  for (DataType weight : {DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B})
    for (const Case& cs : cases()) {
      SCOPED_TRACE(::testing::Message() << Shape(cs.a).to_string() << " x " << Shape(cs.b).to_string() << " "
                                        << to_string(weight));
      check_against_float64(GetParam(), cs, weight, seed++, nullptr);
    }
}

TEST_P(Bf16MatmulPath, ThreadsSplittingColumnsShareThePackedPairs) {
  ThreadPool pool(2);
  check_against_float64(GetParam(), {{300, 600}, {600, 300}}, DataType::BFLOAT8_B, 11, &pool);
}

TEST_P(Bf16MatmulPath, ActivationPaddingNeverLeaksIn) {
  // NaN in a's tile padding (K..Kp) must meet neither the pairs nor the products.
  const Shape as{9, 45}, bs{45, 40};
  const Tensor a = Tensor::from_float(normal_values(as.volume(), 3), as, DataType::BFLOAT16, Layout::TILE,
                                      std::numeric_limits<float>::quiet_NaN());
  const Tensor b = Tensor::from_float(normal_values(bs.volume(), 4), bs, DataType::BFLOAT4_B, Layout::TILE);
  for (float v : product(GetParam(), a, b)) EXPECT_FALSE(std::isnan(v));
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16MatmulPath, ::testing::ValuesIn(bf16_paths()), [](const auto& info) {
  std::string name = info.param.name;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

// Same packing, blocking and order of sums: any difference is a difference in the instruction.
void expect_hardware_bits(const Bf16Path& hardware, const Bf16Path& emulation) {
  uint32_t seed = 900;
  const auto expect_same = [&](const Case& cs, DataType weight) {
    const Tensor a =
        Tensor::from_float(normal_values(Shape(cs.a).volume(), seed), Shape(cs.a), DataType::BFLOAT16, Layout::TILE);
    const Tensor b =
        Tensor::from_float(normal_values(Shape(cs.b).volume(), seed + 1), Shape(cs.b), weight, Layout::TILE);
    ++seed;
    EXPECT_EQ(product(hardware, a, b), product(emulation, a, b))
        << Shape(cs.a).to_string() << " x " << Shape(cs.b).to_string() << " " << to_string(weight);
  };
  for (DataType weight : {DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B})
    for (const Case& cs : cases()) expect_same(cs, weight);
  // The decode rows' kernel on bfloat8_b, and on bfloat4_b where the CPU has VBMI.
  for (DataType weight : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    if (weight == DataType::BFLOAT4_B && !kernels::avx512_bf16_kernel_set().small_m_bf16_bfloat4) continue;
    for (const Case& cs : decode_cases()) expect_same(cs, weight);
  }
}

TEST(Bf16Matmul, HardwareAndEmulationGiveTheSameBits) {
  if (!hardware_has_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  expect_hardware_bits(kAvx512Bf16, kVdpEmulated);
}

TEST(Bf16Matmul, DecodeRowsWithAndWithoutVbmiGiveTheSameBits) {
  // avx512-bf16's bfloat8_b decode rows turn codes into pairs with one byte permute where the CPU
  // has AVX512-VBMI, else with a widening and a word permute; matmul takes the first on such a CPU,
  // so the second is called here directly, against the set matmul uses. Blocks of exponents from
  // 2^-20 to 2^20 and every row count of the kernel (1-6: from 3 rows on, its integer codes and
  // scaled rows of A, looked up with byte or word permutes), several tile rows and columns.
  if (!hardware_has_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const kernels::KernelSet& with = kernels::avx512_bf16_kernel_set();
  const kernels::KernelSet& without = kernels::avx512_bf16_kernel_set_without_vbmi();
  const int64_t K = 320, N = 96;
  std::vector<float> w = normal_values(K * N, 71, 0.5f);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      w[k * N + n] = std::ldexp(w[k * N + n], static_cast<int>((k * 7 + n / 16) % 41) - 20);
  const Tensor b = Tensor::from_float(w, Shape{K, N}, DataType::BFLOAT8_B, Layout::TILE);
  const kernels::TileMatrix tiles{b.bytes().data(), DataType::BFLOAT8_B, K / 32, N / 32};
  ASSERT_EQ(with.small_m_bf16_max, 6);
  for (int m = 1; m <= with.small_m_bf16_max; ++m) {
    // A's rows hold bfloat16 values as floats, as matmul hands them to the kernel.
    const Tensor a16 = Tensor::from_float(normal_values(m * K, 72 + m), Shape{m, K}, DataType::BFLOAT16,
                                          Layout::ROW_MAJOR);
    const std::vector<float> a = a16.to_float();
    std::vector<float> c_with(static_cast<size_t>(m * N), -1.0f), c_without(c_with.size(), -2.0f);
    with.small_m_bf16(m, a.data(), K, tiles, 0, N / 32, c_with.data(), N);
    without.small_m_bf16(m, a.data(), K, tiles, 0, N / 32, c_without.data(), N);
    EXPECT_EQ(c_with, c_without) << "M=" << m;
  }
}

// The decode rows from 3 on scale A's values by their blocks' 2^(E-133) (bfloat8_b; 2^(E-129)
// bfloat4_b, with VBMI): at the ends of float32's range the hardware (vscalefps, then vcvtne2ps2bf16 reading denormals as zero) and the
// emulation must flush and overflow alike. Blocks of 2^-125 to 2^-95 and 2^95 to 2^125 against
// activations of 2^-40 to 2^-20 and 2^10 to 2^40: products that flush, that overflow (NaN on a zero
// code) and that stay normal, in one tile.
TEST(Bf16Matmul, ScaledDecodeRowsFlushAndOverflowAsTheEmulation) {
  if (!hardware_has_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const int64_t K = 96, N = 64;
  std::vector<float> w = normal_values(K * N, 91, 0.5f);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      // Columns 0-15 small blocks only (their sums are all flushes and tiny products), 16-31
      // small and large by turns, 32-63 large only.
      const int spread = static_cast<int>((k * 5 + n / 16 * 3) % 31);
      const bool small = n < 16 || (n < 32 && k % 2 == 0);
      w[k * N + n] = std::ldexp(w[k * N + n], small ? -125 + spread : 95 + spread);
    }
  const kernels::KernelSet& hardware_set = kernels::avx512_bf16_kernel_set();
  for (DataType dtype : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    if (dtype == DataType::BFLOAT4_B && !hardware_set.small_m_bf16_bfloat4) continue;
    const Tensor b = Tensor::from_float(w, Shape{K, N}, dtype, Layout::TILE);
    const kernels::TileMatrix tiles{b.bytes().data(), dtype, K / 32, N / 32};
    for (int m = 3; m <= hardware_set.small_m_bf16_max; ++m) {
      SCOPED_TRACE(::testing::Message() << to_string(dtype) << " M=" << m);
      std::vector<float> a0 = normal_values(m * K, 92 + m);
      // Rows 0 and 1 small (2^-40 to 2^-20: flushes against the small blocks, finite against the
      // large ones), the others large (2^10 to 2^40: overflows against the large blocks).
      for (int64_t i = 0; i < m * K; ++i)
        a0[i] = std::ldexp(a0[i], i / K < 2 ? static_cast<int>(i * 7 % 21) - 40 : static_cast<int>(i * 7 % 31) + 10);
      const std::vector<float> a =
          Tensor::from_float(a0, Shape{m, K}, DataType::BFLOAT16, Layout::ROW_MAJOR).to_float();
      std::vector<float> hardware(static_cast<size_t>(m * N)), emulated(hardware.size());
      hardware_set.small_m_bf16(m, a.data(), K, tiles, 0, N / 32, hardware.data(), N);
      kernels::emulated_bf16_kernel_set().small_m_bf16(m, a.data(), K, tiles, 0, N / 32, emulated.data(), N);
      int special = 0, normal = 0;
      for (size_t i = 0; i < hardware.size(); ++i) {
        special += !std::isfinite(hardware[i]);
        normal += std::isfinite(hardware[i]) && hardware[i] != 0.0f;
        if (std::isnan(hardware[i]) || std::isnan(emulated[i]))
          EXPECT_TRUE(std::isnan(hardware[i]) && std::isnan(emulated[i])) << "value " << i;
        else
          EXPECT_EQ(hardware[i], emulated[i]) << "value " << i;
      }
      EXPECT_GT(special, 0) << "no value overflowed";
      EXPECT_GT(normal, static_cast<int>(hardware.size()) / 4) << "too few finite values to compare";
    }
  }
}

TEST(Bf16Matmul, FirstCallOfAPanelDecodesItAsTheSeparateDecodeWould) {
  // The blocked path's first micro-kernel call of each B panel reads B from its stored tiles and
  // leaves the decoded panel behind for the others (KernelSet::bf16_micro_kernel_from_tiles). It
  // must give the C of a separate decode and the plain micro-kernel, bit for bit, and the same
  // panel: for every weight format, one and several tiles of K, every row count of the kernel,
  // with and without adding into C.
  if (!hardware_has_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const kernels::KernelSet& ks = kernels::avx512_bf16_kernel_set();
  ASSERT_NE(ks.bf16_micro_kernel_from_tiles, nullptr);
  const int64_t K = 512, N = 96, ldc = 40;  // 16 tile rows, 3 tile columns; panels from column 1
  for (DataType dtype : {DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    std::vector<float> w = normal_values(K * N, 81, 0.5f);
    for (int64_t i = 0; i < K * N; ++i) w[i] = std::ldexp(w[i], static_cast<int>(i % 23) - 11);
    const Tensor b = Tensor::from_float(w, Shape{K, N}, dtype, Layout::TILE);
    const kernels::TileMatrix tiles{b.bytes().data(), dtype, K / 32, N / 32};
    const ptrdiff_t tile_step = tiles.tile_cols * static_cast<ptrdiff_t>(tile_bytes(dtype));
    for (int64_t kc : {int64_t{32}, K})
      for (int mr : {1, 2, 7, 13, 14}) {
        std::vector<uint32_t> a_pairs(static_cast<size_t>(kc / 2 * mr));
        std::mt19937 rng(static_cast<uint32_t>(kc * 100 + mr));
        for (uint32_t& p : a_pairs) {  // pairs of finite bfloat16 values, both signs
          const float x = std::ldexp(static_cast<float>(rng() % 2001) - 1000.0f, -10);
          const float y = std::ldexp(static_cast<float>(rng() % 2001) - 1000.0f, -9);
          p = kernels::bf16_pair(bf16(x), bf16(y));
        }
        std::vector<uint32_t> separate(static_cast<size_t>(kc / 2 * 32)), fused(separate.size(), 0xFFFFFFFFu);
        for (int64_t kt = 0; kt < kc / 32; ++kt)
          ks.decode_tile_bf16_pairs(tiles.tile(kt, 1), dtype, separate.data() + kt * 16 * 32);
        for (bool accumulate : {false, true}) {
          std::vector<float> c_separate(static_cast<size_t>(mr * ldc), 0.25f), c_fused(c_separate);
          ks.bf16_micro_kernel(mr, kc, a_pairs.data(), separate.data(), c_separate.data(), ldc, accumulate);
          // The next panel: the tile column to the right.
          const kernels::StoredPanel panel{tiles.tile(0, 1), tile_step, dtype, tiles.tile(0, 2), kc / 32};
          ks.bf16_micro_kernel_from_tiles(mr, kc, a_pairs.data(), panel, fused.data(), c_fused.data(), ldc,
                                          accumulate);
          EXPECT_EQ(c_fused, c_separate) << to_string(dtype) << " kc=" << kc << " mr=" << mr;
          EXPECT_EQ(fused, separate) << to_string(dtype) << " kc=" << kc << " mr=" << mr;
        }
      }
  }
}

TEST(Bf16Matmul, PackerOfAPanelsGivesThePortablePairs) {
  // avx512-bf16 packs A's micro-panels from the tiles with an in-register transpose
  // (KernelSet::pack_bf16_a_panel); the portable packer moves the same pairs one at a time. Every
  // row count of a micro-panel (1-14 and the split of larger blocks), K inside one face row, over
  // a K block and over two row blocks, NaN in the tiles' padding: the same words everywhere.
  if (!hardware_has_bf16()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  const kernels::KernelSet& hardware = kernels::avx512_bf16_kernel_set();
  ASSERT_NE(hardware.pack_bf16_a_panel, nullptr);
  kernels::KernelSet portable = hardware;
  portable.pack_bf16_a_panel = nullptr;
  std::vector<int64_t> row_counts;
  for (int64_t m = 1; m <= 16; ++m) row_counts.push_back(m);
  for (int64_t m : {29, 33, 128, 530}) row_counts.push_back(m);
  for (int64_t m : row_counts)
    for (int64_t k : {int64_t{7}, int64_t{16}, int64_t{47}, int64_t{600}, int64_t{1100}}) {
      if (m * k > 128 * 1100) continue;
      const Tensor a = Tensor::from_float(normal_values(m * k, static_cast<uint32_t>(m * 31 + k)), Shape{m, k},
                                          DataType::BFLOAT16, Layout::TILE, std::numeric_limits<float>::quiet_NaN());
      const int64_t kp = (k + 31) / 32 * 32, tile_cols = kp / 32;
      std::vector<const uint16_t*> rows(static_cast<size_t>(m));
      for (int64_t r = 0; r < m; ++r)
        rows[r] = a.data<uint16_t>() + (r / 32 * tile_cols) * kTileVolume + tile_element_index(r % 32, 0);
      std::vector<uint32_t> got(static_cast<size_t>(m * kp / 2), 0xDEADBEEFu), want(got.size(), 0x12345678u);
      for (int64_t piece = 0; piece < kernels::gemm_pack_pieces(m, kp, true); ++piece) {
        kernels::gemm_pack_a_piece_bf16_tiles(hardware, m, rows.data(), k, kp, piece, got.data());
        kernels::gemm_pack_a_piece_bf16_tiles(portable, m, rows.data(), k, kp, piece, want.data());
      }
      EXPECT_EQ(got, want) << "M=" << m << " K=" << k;
    }
}

TEST(Bf16Matmul, AmxHardwareAndEmulationGiveTheSameBits) {
  if (!hardware_has_amx()) GTEST_SKIP() << "this CPU (or its OS) offers no AMX-BF16; the emulation's rules are tested above";
  expect_hardware_bits(kAmxBf16, kAmxEmulated);
}

// The check that the AMX set passes on a CPU before kernel_set hands it out.
TEST(Bf16SelfCheck, AcceptsEveryCorrectKernel) {
  EXPECT_TRUE(kernels::bf16_micro_kernel_exact(kernels::emulated_bf16_kernel_set()));
  EXPECT_TRUE(kernels::bf16_micro_kernel_exact(kernels::emulated_amx_kernel_set()));
  if (hardware_has_bf16()) {
    EXPECT_TRUE(kernels::bf16_micro_kernel_exact(kernels::avx512_bf16_kernel_set()));
  }
  if (hardware_has_amx()) {
    EXPECT_TRUE(kernels::bf16_micro_kernel_exact(kernels::amx_bf16_kernel_set()));
  }
}

// Faults a tile kernel could have on real hardware, made from the emulated one.
void emulated_amx_kernel(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool accumulate) {
  kernels::emulated_amx_kernel_set().bf16_micro_kernel(mr, kc, a, b, c, ldc, accumulate);
}
void second_tile_row_lost(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool acc) {
  emulated_amx_kernel(std::min(mr, 16), kc, a, b, c, ldc, acc);
}
void c_never_loaded(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool) {
  emulated_amx_kernel(mr, kc, a, b, c, ldc, false);
}
void one_k_step_only(int mr, int64_t, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool acc) {
  emulated_amx_kernel(mr, 32, a, b, c, ldc, acc);
}
void last_value_off(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool acc) {
  emulated_amx_kernel(mr, kc, a, b, c, ldc, acc);
  c[(mr - 1) * ldc + 31] += 1.0f;
}
void writes_past_column_31(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool acc) {
  emulated_amx_kernel(mr, kc, a, b, c, ldc, acc);
  c[32] = 0.0f;
}

TEST(Bf16SelfCheck, RejectsKernelsWithTileFaults) {
  using Kernel = decltype(kernels::KernelSet::bf16_micro_kernel);
  const std::pair<const char*, Kernel> faults[] = {{"second tile row lost", second_tile_row_lost},
                                                    {"C never loaded", c_never_loaded},
                                                    {"one K step only", one_k_step_only},
                                                    {"last value off by one", last_value_off},
                                                    {"writes past column 31", writes_past_column_31}};
  kernels::KernelSet faulty = kernels::emulated_amx_kernel_set();
  faulty.bf16_micro_kernel = emulated_amx_kernel;
  ASSERT_TRUE(kernels::bf16_micro_kernel_exact(faulty));  // the wrapper itself is sound
  for (const auto& [name, kernel] : faults) {
    faulty.bf16_micro_kernel = kernel;
    EXPECT_FALSE(kernels::bf16_micro_kernel_exact(faulty)) << name;
  }
}

TEST(Bf16SelfCheck, AFailingSetIsReplacedWithAWarning) {
  const kernels::KernelSet& fallback = kernels::emulated_bf16_kernel_set();
  kernels::KernelSet faulty = kernels::emulated_amx_kernel_set();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(&kernels::kernel_set_if_exact(faulty, fallback), &faulty);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  faulty.bf16_micro_kernel = second_tile_row_lost;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(&kernels::kernel_set_if_exact(faulty, fallback), &fallback);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("amx-emulated micro-kernel gave wrong results"), std::string::npos) << warning;
  EXPECT_NE(warning.find("take bf16-emulated instead"), std::string::npos) << warning;
}

TEST(Bf16Matmul, PathChoice) {
  // The path takes bfloat16 activations with weights exact in bfloat16, beyond the small-M rows.
  const MatmulOptions emulated = options_for(kVdpEmulated), amx_emulated = options_for(kAmxEmulated);
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT4_B, 128, false, amx_emulated), "amx-emulated");
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT8_B, 4, false, amx_emulated), "bf16-emulated");
  EXPECT_STREQ(matmul_kernel_path(DataType::FLOAT32, DataType::BFLOAT8_B, 128, false, amx_emulated), "portable");
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT8_B, 128, false, emulated), "bf16-emulated");
  // Decode rows on bfloat8_b and bfloat4_b have a bf16 kernel of their own; not when transposed or
  // from float32.
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT4_B, 4, false, emulated), "bf16-emulated");
  EXPECT_STREQ(matmul_kernel_path(DataType::FLOAT32, DataType::BFLOAT4_B, 4, false, emulated), "portable");
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT8_B, 4, false, emulated), "bf16-emulated");
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT8_B, 1, true, emulated), "portable");
  EXPECT_STREQ(matmul_kernel_path(DataType::FLOAT32, DataType::BFLOAT8_B, 1, false, emulated), "portable");
  EXPECT_STREQ(matmul_kernel_path(DataType::FLOAT32, DataType::BFLOAT8_B, 128, false, emulated), "portable");
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::FLOAT32, 128, false, emulated), "portable");
  EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT16, 128, true, emulated), "portable");
  if (hardware_has_amx()) {
    EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT4_B, 32), "amx-bf16");
    EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT8_B, 1), "avx512-bf16");
    EXPECT_STREQ(matmul_kernel_path(DataType::FLOAT32, DataType::BFLOAT4_B, 32), "avx512");
  }
  if (hardware_has_bf16()) {
    IsaCap bf16_cap(Isa::AVX512_BF16);
    EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT4_B, 32), "avx512-bf16");
    EXPECT_STREQ(matmul_kernel_path(DataType::FLOAT32, DataType::BFLOAT4_B, 32), "avx512");
    EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT4_B, 1),
                 kernels::avx512_bf16_kernel_set().small_m_bf16_bfloat4 ? "avx512-bf16" : "avx512");
    EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT8_B, 1), "avx512-bf16");
    IsaCap cap(Isa::AVX512);  // MESHNN_KERNELS=avx512 keeps float32 products
    EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT4_B, 32), "avx512");
    EXPECT_STREQ(matmul_kernel_path(DataType::BFLOAT16, DataType::BFLOAT8_B, 1), "avx512");
  }
}

}  // namespace
}  // namespace meshnn
