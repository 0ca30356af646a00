// matmul / linear against an independent float64 reference, over every dtype combination and
// every kernel instruction set this CPU runs, on odd shapes (non-multiples of 32), batch
// broadcasting and transposes.
//
// Tolerances (u = 2^-24, float32 unit roundoff; K terms accumulated in float32, any order):
//  * vs the float64 product of the *dequantised* inputs (what the kernel is given):
//      |C - C64| <= K * u * sum_k |a_mk| |b_kn|  (+ output rounding: 2^-8 |C| for bfloat16)
//    The factor K * u is the classic gamma_K bound, so a kernel bug of any real size fails it.
//  * vs the float64 product of the *original* float values, which adds the weight format's error:
//      bfloat16: |b - q(b)| <= 2^-8 |b|        -> + 2^-8 * sum_k |a_mk| |b_kn|
//      bfloat8_b / bfloat4_b (W magnitude bits, no hidden one; the shared exponent is the block's
//      largest, rounding is to half a step of 2^(E-127-(W-1)) but saturation can cost a full
//      step): |b - q(b)| <= 2^-(W-1) * max|block|
//                                               -> + 2^-(W-1) * sum_k |a_mk| max|block(k, n)|
//    and the PCC against the original values must reach 0.9999 (bf16), 0.999 (bfp8), 0.98 (bfp4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/core/thread_pool.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/tensor/tensor.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using kernels::Isa;

using testing::normal_values;

std::vector<Isa> isas() {
  std::vector<Isa> out{Isa::PORTABLE};
  if (kernels::best_supported_isa() >= Isa::AVX2) out.push_back(Isa::AVX2);
  if (kernels::best_supported_isa() >= Isa::AVX512) out.push_back(Isa::AVX512);
  // bfloat16 products for bfloat16 activations (the bounds below hold: every product is exact).
  if (kernels::best_supported_isa() >= Isa::AVX512_BF16) out.push_back(Isa::AVX512_BF16);
  if (kernels::best_supported_isa() >= Isa::AMX_BF16) out.push_back(Isa::AMX_BF16);
  return out;
}

using IsaCap = testing::ScopedIsaCap;

// Float64 reference: c[batch][m][n] with numpy broadcasting of the leading dims, written without
// the library's broadcast helper. Also returns sum |a||b| and sum |a| * blockmax(b) per element.
struct Reference {
  std::vector<int64_t> dims;  // output shape
  std::vector<double> c, abs_sum, block_sum;
};

Reference reference_matmul(const std::vector<float>& a, const Shape& as, const std::vector<float>& b, const Shape& bs,
                           bool ta, bool tb, const std::vector<float>* block_max) {
  const int64_t am = as[-2], ak = as[-1], bk = bs[-2], bn = bs[-1];
  const int64_t M = ta ? ak : am, K = ta ? am : ak, N = tb ? bk : bn;
  const int rank = std::max(as.rank(), bs.rank());
  std::vector<int64_t> ad(rank - 2, 1), bd(rank - 2, 1), od(rank - 2);
  for (int i = 0; i < as.rank() - 2; ++i) ad[rank - as.rank() + i] = as[i];
  for (int i = 0; i < bs.rank() - 2; ++i) bd[rank - bs.rank() + i] = bs[i];
  int64_t batches = 1;
  for (int i = 0; i < rank - 2; ++i) {
    od[i] = std::max(ad[i], bd[i]);
    batches *= od[i];
  }
  Reference r;
  r.dims = od;
  r.dims.push_back(M);
  r.dims.push_back(N);
  r.c.assign(batches * M * N, 0);
  r.abs_sum.assign(batches * M * N, 0);
  r.block_sum.assign(batches * M * N, 0);
  for (int64_t ob = 0; ob < batches; ++ob) {
    int64_t rem = ob, abi = 0, bbi = 0, astride = 1, bstride = 1;
    for (int i = rank - 3; i >= 0; --i) {
      const int64_t coord = rem % od[i];
      rem /= od[i];
      abi += (ad[i] == 1 ? 0 : coord) * astride;
      bbi += (bd[i] == 1 ? 0 : coord) * bstride;
      astride *= ad[i];
      bstride *= bd[i];
    }
    const float* A = a.data() + abi * M * K;
    const float* B = b.data() + bbi * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, sa = 0, sb = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = ta ? A[k * M + m] : A[m * K + k];
          const int64_t bi = tb ? n * K + k : k * N + n;
          s += av * B[bi];
          sa += std::fabs(av * B[bi]);
          if (block_max) sb += std::fabs(av) * (*block_max)[bbi * K * N + bi];
        }
        const int64_t o = (ob * M + m) * N + n;
        r.c[o] = s;
        r.abs_sum[o] = sa;
        r.block_sum[o] = sb;
      }
  }
  return r;
}

// max |value| over the 16-element block (face row) holding each element of a logical
// [batch, rows, cols] matrix: blocks are 16 consecutive columns of one row, aligned to 16.
std::vector<float> block_max_of(const std::vector<float>& v, const Shape& s) {
  const int64_t rows = s[-2], cols = s[-1], batch = s.volume() / std::max<int64_t>(1, rows * cols);
  std::vector<float> out(v.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < cols; c0 += 16) {
        const int64_t base = (b * rows + r) * cols;
        float mx = 0;
        for (int64_t c = c0; c < std::min(cols, c0 + 16); ++c) mx = std::max(mx, std::fabs(v[base + c]));
        for (int64_t c = c0; c < std::min(cols, c0 + 16); ++c) out[base + c] = mx;
      }
  return out;
}

double format_rel_error(DataType d) {
  switch (d) {
    case DataType::BFLOAT16:
      return std::ldexp(1.0, -8);
    case DataType::BFLOAT8_B:
      return std::ldexp(1.0, -6);
    case DataType::BFLOAT4_B:
      return std::ldexp(1.0, -2);
    default:
      return 0;
  }
}

double min_pcc(DataType d) {
  switch (d) {
    case DataType::BFLOAT16:
      return 0.9999;
    case DataType::BFLOAT8_B:
      return 0.999;
    case DataType::BFLOAT4_B:
      return 0.98;
    default:
      return 0.999999;
  }
}

struct Case {
  std::vector<int64_t> a, b;  // stored shapes
  bool ta = false, tb = false;
};

// Checks one matmul; returns the number of elements outside the bounds (reported via gtest).
void check_matmul(const Case& cs, DataType adt, DataType bdt, Isa isa, uint32_t seed) {
  const Shape as(cs.a), bs(cs.b);
  const std::vector<float> a0 = normal_values(as.volume(), seed), b0 = normal_values(bs.volume(), seed + 1, 0.5f);
  const Tensor a = Tensor::from_float(a0, as, adt, Layout::TILE);
  // Blocks of B run along its stored rows, so transposed B has them along K.
  const Tensor b = Tensor::from_float(b0, bs, bdt, Layout::TILE);
  const std::vector<float> aq = a.to_float(), bq = b.to_float();
  const std::vector<float> bmax = block_max_of(b0, bs);

  IsaCap cap(isa);
  MatmulOptions opt;
  opt.output_dtype = DataType::FLOAT32;
  const Tensor c = matmul(a, b, cs.ta, cs.tb, opt);
  const std::vector<float> got = c.to_float();

  const Reference rq = reference_matmul(aq, as, bq, bs, cs.ta, cs.tb, nullptr);
  const Reference r0 = reference_matmul(aq, as, b0, bs, cs.ta, cs.tb, &bmax);
  ASSERT_EQ(c.shape(), Shape(rq.dims));
  const int64_t K = cs.ta ? as[-2] : as[-1];
  const double gamma = K * std::ldexp(1.0, -24);
  const double fmt_err = format_rel_error(bdt);
  int64_t bad_q = 0, bad_0 = 0;
  double worst_q = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol_q = gamma * rq.abs_sum[i] + 1e-30;
    const double err_q = std::fabs(got[i] - rq.c[i]);
    worst_q = std::max(worst_q, err_q / tol_q);
    if (err_q > tol_q) ++bad_q;
    const double fmt_term = is_block_float(bdt) ? fmt_err * r0.block_sum[i] : fmt_err * r0.abs_sum[i];
    if (std::fabs(got[i] - r0.c[i]) > gamma * r0.abs_sum[i] + fmt_term + 1e-30) ++bad_0;
  }
  EXPECT_EQ(bad_q, 0) << "vs dequantised reference; worst err/tol " << worst_q;
  EXPECT_EQ(bad_0, 0) << "vs original values";
  std::vector<float> ref0(r0.c.begin(), r0.c.end());
  EXPECT_GE(pcc(ref0, got), min_pcc(bdt));
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{1, 45}, {45, 70}},  // decode row, small-M path
      {{3, 33}, {33, 31}},  // small-M, one padded tile each way
      {{4, 64}, {64, 96}},
      {{7, 100}, {100, 65}},                   // panel path, M not a multiple of the micro rows
      {{37, 300}, {300, 129}},                 // K > one K block (256): accumulation across blocks
      {{2, 3, 17, 40}, {40, 50}},              // batched a, shared b (folded rows)
      {{2, 1, 5, 40}, {1, 3, 40, 33}},         // batch dims broadcast both ways
      {{19, 40}, {2, 40, 35}},                 // shared a, batched b
      {{40, 21}, {40, 66}, true, false},       // transpose_a
      {{9, 70}, {45, 70}, false, true},        // transpose_b (small M goes through panels)
      {{2, 50, 12}, {2, 34, 50}, true, true},  // both
  };
  return all;
}

class KernelsMatmulIsa : public ::testing::TestWithParam<Isa> {};

TEST_P(KernelsMatmulIsa, AllDtypesOddShapesMatchFloat64) {
  const Isa isa = GetParam();
  uint32_t seed = 100;
  for (DataType adt : {DataType::FLOAT32, DataType::BFLOAT16})
    for (DataType bdt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B})
      for (const Case& cs : cases()) {
        SCOPED_TRACE(::testing::Message()
                     << "a " << Shape(cs.a).to_string() << " " << to_string(adt) << (cs.ta ? " T" : "") << ", b "
                     << Shape(cs.b).to_string() << " " << to_string(bdt) << (cs.tb ? " T" : ""));
        check_matmul(cs, adt, bdt, isa, seed++);
      }
}

TEST_P(KernelsMatmulIsa, LargeMCrossesRowBlocks) {
  // M = 530 > the 480-row A block; B decoded once per block of rows.
  check_matmul({{530, 70}, {70, 40}}, DataType::FLOAT32, DataType::BFLOAT8_B, GetParam(), 7);
}

TEST_P(KernelsMatmulIsa, OutputRowsAPowerOfTwoApart) {
  // N = 1024: C's rows are 4 KiB apart, so the blocked loops accumulate C in a block of their own
  // and copy it out (gemm.cpp, c_rows_crowd_l1); K = 600 spans K blocks, N four column blocks.
  for (DataType act : {DataType::FLOAT32, DataType::BFLOAT16})
    check_matmul({{45, 600}, {600, 1024}}, act, DataType::BFLOAT8_B, GetParam(), 8);
}

TEST_P(KernelsMatmulIsa, PrefillBlockingAllLoopsWithThreads) {
  // M = 1000: three row blocks; K = 600: three K blocks; N = 300: two column blocks of 8 tiles;
  // with two threads sharing the packed A.
  ThreadPool pool(2);
  const Shape as{1000, 600}, bs{600, 300};
  const std::vector<float> a0 = normal_values(as.volume(), 41), b0 = normal_values(bs.volume(), 42, 0.5f);
  const Tensor a = Tensor::from_float(a0, as, DataType::BFLOAT16, Layout::TILE);
  const Tensor b = Tensor::from_float(b0, bs, DataType::BFLOAT8_B, Layout::TILE);
  IsaCap cap(GetParam());
  MatmulOptions opt;
  opt.output_dtype = DataType::FLOAT32;
  opt.pool = &pool;
  const std::vector<float> got = matmul(a, b, false, false, opt).to_float();
  const Reference r = reference_matmul(a.to_float(), as, b.to_float(), bs, false, false, nullptr);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - r.c[i]) > 600 * std::ldexp(1.0, -24) * r.abs_sum[i]) ++bad;
  EXPECT_EQ(bad, 0);
}

TEST_P(KernelsMatmulIsa, ManyRowsLinearFoldedAcrossRowBlocks) {
  // 3 batches of 250 rows sharing one weight fold into 750 rows: two row blocks of 375 (gemm.cpp),
  // so batch 1 starts in one and ends in the other. Bias and activation on every row, in float32
  // and bfloat16 output; the padding rows of each batch's last tile row (250..255) zeros in a
  // fresh output; linear_into over an output that held other values gives the same values.
  const int64_t B = 3, M = 250, K = 70, N = 90;
  const Shape xs{B, M, K};
  const Tensor x = Tensor::from_float(normal_values(xs.volume(), 71), xs, DataType::BFLOAT16, Layout::TILE);
  const Tensor w = Tensor::from_float(normal_values(K * N, 72, 0.3f), Shape{K, N}, DataType::BFLOAT8_B, Layout::TILE);
  const Tensor bias = Tensor::from_float(normal_values(N, 73), Shape{N}, DataType::BFLOAT16, Layout::ROW_MAJOR);
  const std::vector<float> xq = x.to_float(), wq = w.to_float(), bq = bias.to_float();
  IsaCap cap(GetParam());
  for (DataType out : {DataType::FLOAT32, DataType::BFLOAT16}) {
    SCOPED_TRACE(to_string(out));
    {
      Tensor junk(Shape{B, M, N}, out, Layout::TILE);
      std::memset(junk.data<std::byte>(), 0xA5, junk.size_bytes());
    }
    MatmulOptions opt;
    opt.output_dtype = out;
    const Tensor y = linear(x, w, &bias, Activation::SILU, opt);
    ASSERT_EQ(y.shape(), (Shape{B, M, N}));
    const std::vector<float> got = y.to_float();
    int64_t bad = 0;
    for (int64_t r = 0; r < B * M; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double s = bq[n], sa = std::fabs(bq[n]);
        for (int64_t k = 0; k < K; ++k) {
          s += double(xq[r * K + k]) * wq[k * N + n];
          sa += std::fabs(double(xq[r * K + k]) * wq[k * N + n]);
        }
        const double v = s / (1 + std::exp(-s));
        // As in KernelsLinear.BiasAndActivationsAllOutputDtypes: |silu'| <= 1.13.
        double tol = 1.13 * (K + 1) * std::ldexp(1.0, -24) * sa + 4 * std::ldexp(std::fabs(v), -24) + 1e-30;
        if (out == DataType::BFLOAT16) tol += std::ldexp(std::fabs(v), -8);
        if (std::fabs(got[r * N + n] - v) > tol) ++bad;
      }
    EXPECT_EQ(bad, 0);
    const Tensor stored_afresh = Tensor::from_float(got, y.shape(), out, Layout::TILE);
    ASSERT_EQ(y.size_bytes(), stored_afresh.size_bytes());
    EXPECT_EQ(std::memcmp(y.data<std::byte>(), stored_afresh.data<std::byte>(), y.size_bytes()), 0)
        << "a byte of the output (padding rows included) differs from the same values stored afresh";

    // Into an output that holds another product of the same tiles (256 rows a batch).
    const Shape xs2{B, 256, K};
    const Tensor x2 = Tensor::from_float(normal_values(xs2.volume(), 74), xs2, DataType::BFLOAT16, Layout::TILE);
    Tensor reused;
    linear_into(x2, w, &bias, Activation::SILU, reused, opt);
    linear_into(x, w, &bias, Activation::SILU, reused, opt);
    EXPECT_EQ(reused.shape(), y.shape());
    EXPECT_EQ(reused.to_float(), got);
  }
}

TEST_P(KernelsMatmulIsa, ActivationPaddingNeverLeaksIn) {
  // The padding of a (columns K..Kp) may hold anything, here NaN; the kernels must not use it.
  const Shape as{5, 40}, bs{40, 20};
  const std::vector<float> a0 = normal_values(as.volume(), 43), b0 = normal_values(bs.volume(), 44);
  const Tensor a = Tensor::from_float(a0, as, DataType::FLOAT32, Layout::TILE, std::nanf(""));
  const Tensor b = Tensor::from_float(b0, bs, DataType::BFLOAT4_B, Layout::TILE);
  IsaCap cap(GetParam());
  for (const std::vector<float>& c :
       {matmul(a, b).to_float(),
        matmul(Tensor::from_float(normal_values(40, 45), Shape{1, 40}, DataType::FLOAT32, Layout::TILE, std::nanf("")),
               b)
            .to_float()})
    for (float v : c) EXPECT_FALSE(std::isnan(v));
}

TEST_P(KernelsMatmulIsa, EveryDecodeRowCount) {
  // M = 1..16 crosses the small-M / panel switch and every micro-kernel height.
  for (int64_t m = 1; m <= 16; ++m) {
    SCOPED_TRACE(::testing::Message() << "M=" << m);
    check_matmul({{m, 96}, {96, 64}}, DataType::BFLOAT16, DataType::BFLOAT4_B, GetParam(), 300 + m);
    check_matmul({{m, 160}, {160, 96}}, DataType::BFLOAT16, DataType::BFLOAT8_B, GetParam(), 400 + m);
  }
}

TEST_P(KernelsMatmulIsa, DecodeRowsWithTinyWeightBlocks) {
  // One-row kernels and the small-M loop of a few rows build block scales from the exponent bits
  // and fold constants into them; blocks of magnitude down to 1e-37 (shared exponents below 31,
  // some below W) must stay exact, also where a whole output column is tiny. Rows of B scaled by
  // 2^-(4k % 130).
  for (int64_t rows : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "M=" << rows);
    const Shape as{rows, 96}, bs{96, 64};
    std::vector<float> b0 = normal_values(bs.volume(), 51, 0.5f);
    for (int64_t k = 0; k < 96; ++k)
      for (int64_t n = 0; n < 64; ++n) b0[k * 64 + n] = std::ldexp(b0[k * 64 + n], -static_cast<int>((4 * k) % 130));
    for (int64_t k = 0; k < 96; ++k) b0[k * 64 + 63] = std::ldexp(1.0f + 0.01f * static_cast<float>(k), -110);
    const Tensor a = Tensor::from_float(normal_values(as.volume(), 52), as, DataType::FLOAT32, Layout::TILE);
    for (DataType bdt : {DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
      SCOPED_TRACE(to_string(bdt));
      const Tensor b = Tensor::from_float(b0, bs, bdt, Layout::TILE);
      IsaCap cap(GetParam());
      MatmulOptions opt;
      opt.output_dtype = DataType::FLOAT32;
      const std::vector<float> got = matmul(a, b, false, false, opt).to_float();
      const Reference r = reference_matmul(a.to_float(), as, b.to_float(), bs, false, false, nullptr);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_LE(std::fabs(got[i] - r.c[i]), 96 * std::ldexp(1.0, -24) * r.abs_sum[i]) << "output " << i;
    }
  }
}

TEST_P(KernelsMatmulIsa, SmallMWalksGiveTheSameBits) {
  // The small-M kernels walk B's tiles linearly or several tile rows at once (kernels::SmallMWalk,
  // chosen per CPU); every output column meets its tiles in the same order either way, so the bits
  // must agree. K = 300 is 10 tile rows: two groups of 4 and a shorter last one; 2 threads split N.
  ThreadPool pool(2);
  IsaCap cap(GetParam());
  for (DataType adt : {DataType::FLOAT32, DataType::BFLOAT16})
    for (DataType bdt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B})
      for (int64_t m : {1, 3, 4}) {
        SCOPED_TRACE(::testing::Message() << to_string(adt) << " x " << to_string(bdt) << ", M=" << m);
        const Tensor a = Tensor::from_float(normal_values(m * 300, 61), Shape{m, 300}, adt, Layout::TILE);
        const Tensor b = Tensor::from_float(normal_values(300 * 200, 62), Shape{300, 200}, bdt, Layout::TILE);
        MatmulOptions opt;
        opt.output_dtype = DataType::FLOAT32;
        opt.pool = &pool;
        std::vector<float> got[2];
        const kernels::SmallMWalk walks[2] = {kernels::SmallMWalk::LINEAR, kernels::SmallMWalk::ROWS_IN_FLIGHT};
        for (int w = 0; w < 2; ++w) {
          kernels::set_small_m_walk(walks[w]);
          got[w] = matmul(a, b, false, false, opt).to_float();
        }
        kernels::reset_small_m_walk();
        EXPECT_EQ(got[0], got[1]);
      }
}

INSTANTIATE_TEST_SUITE_P(Isas, KernelsMatmulIsa, ::testing::ValuesIn(isas()),
                         [](const auto& info) {
                           std::string name = kernels::to_string(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');  // gtest names: no '-'
                           return name;
                         });

// Linear: bias then activation, output in every dtype; reference in float64 from dequantised
// inputs. Output rounding adds 2^-8 |y| (bfloat16) or 2^-(W-1) * max|block| (block floats, via
// PCC only since the block max of the output is what the kernel chose).
TEST(KernelsLinear, BiasAndActivationsAllOutputDtypes) {
  const int64_t M = 13, K = 75, N = 90;
  const std::vector<float> x0 = normal_values(M * K, 1), w0 = normal_values(K * N, 2, 0.3f), b0 = normal_values(N, 3);
  const Tensor x = Tensor::from_float(x0, Shape{M, K}, DataType::BFLOAT16, Layout::TILE);
  const Tensor w = Tensor::from_float(w0, Shape{K, N}, DataType::BFLOAT8_B, Layout::TILE);
  const Tensor bias = Tensor::from_float(b0, Shape{N}, DataType::BFLOAT16, Layout::ROW_MAJOR);
  const std::vector<float> xq = x.to_float(), wq = w.to_float(), bq = bias.to_float();
  for (Activation act : {Activation::NONE, Activation::GELU, Activation::GELU_TANH, Activation::SILU, Activation::RELU})
    for (DataType odt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
      SCOPED_TRACE(::testing::Message() << to_string(act) << " -> " << to_string(odt));
      MatmulOptions opt;
      opt.output_dtype = odt;
      const Tensor y = linear(x, w, &bias, act, opt);
      ASSERT_EQ(y.dtype(), odt);
      ASSERT_EQ(y.shape(), (Shape{M, N}));
      const std::vector<float> got = y.to_float();
      std::vector<float> ref(M * N);
      int64_t bad = 0;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double s = bq[n], sa = std::fabs(bq[n]);
          for (int64_t k = 0; k < K; ++k) {
            s += double(xq[m * K + k]) * wq[k * N + n];
            sa += std::fabs(double(xq[m * K + k]) * wq[k * N + n]);
          }
          double v = s;
          switch (act) {
            case Activation::GELU:
              v = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
              break;
            case Activation::GELU_TANH:
              v = 0.5 * s * (1 + std::tanh(std::sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
              break;
            case Activation::SILU:
              v = s / (1 + std::exp(-s));
              break;
            case Activation::RELU:
              v = s > 0 ? s : 0;
              break;
            default:
              break;
          }
          ref[m * N + n] = static_cast<float>(v);
          // Every activation here has |f'| <= 1.13, so input error passes through at most 1.13x;
          // plus 4 ulps of float32 for the activation's own evaluation.
          double tol = 1.13 * (K + 1) * std::ldexp(1.0, -24) * sa + 4 * std::ldexp(std::fabs(v), -24) + 1e-30;
          if (odt == DataType::BFLOAT16) tol += std::ldexp(std::fabs(v), -8);
          if (!is_block_float(odt) && std::fabs(got[m * N + n] - v) > tol) ++bad;
        }
      EXPECT_EQ(bad, 0);
      EXPECT_GE(pcc(ref, got), odt == DataType::BFLOAT4_B ? 0.97 : 0.999);
    }
}

TEST(KernelsMatmul, ThreadsGiveBitwiseTheSameResult) {
  // Columns are split between threads, never K, so the summation order per element is unchanged.
  ThreadPool pool(2);
  for (auto shape : {std::vector<int64_t>{1, 200, 300}, {40, 200, 300}, {6, 3, 5, 64}}) {
    const Shape as(shape.size() == 3 ? std::vector<int64_t>{shape[0], shape[1]}
                                     : std::vector<int64_t>{shape[0], shape[1], shape[2], shape[3]});
    const Shape bs = shape.size() == 3 ? Shape{shape[1], shape[2]} : Shape{shape[0], 1, shape[3], 45};
    const Tensor a = Tensor::from_float(normal_values(as.volume(), 5), as, DataType::FLOAT32, Layout::TILE);
    const Tensor b = Tensor::from_float(normal_values(bs.volume(), 6), bs, DataType::BFLOAT8_B, Layout::TILE);
    MatmulOptions one, two;
    two.pool = &pool;
    const std::vector<float> c1 = matmul(a, b, false, false, one).to_float();
    const std::vector<float> c2 = matmul(a, b, false, false, two).to_float();
    EXPECT_EQ(c1, c2) << as.to_string() << " x " << bs.to_string();
  }
}

TEST(KernelsMatmul, OutputTilePaddingIsWrittenEvenInReusedMemory) {
  // matmul does not zero its output first (Tensor::uninitialized): the epilogue must write every
  // byte of every tile, padding included. A just-freed buffer of the same size, filled with junk,
  // is what the allocator hands out next, so a byte the epilogue skipped shows as junk. Expected:
  // the same logical values stored afresh, whose padding is zero.
  const Shape as{1, 40}, bs{40, 20};
  const Tensor a = Tensor::from_float(normal_values(as.volume(), 61), as, DataType::FLOAT32, Layout::TILE);
  const Tensor b = Tensor::from_float(normal_values(bs.volume(), 62), bs, DataType::BFLOAT8_B, Layout::TILE);
  for (DataType out : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B}) {
    SCOPED_TRACE(to_string(out));
    {
      Tensor junk(Shape{1, 20}, out, Layout::TILE);
      std::memset(junk.data<std::byte>(), 0xA5, junk.size_bytes());
    }
    MatmulOptions opt;
    opt.output_dtype = out;
    const Tensor c = matmul(a, b, false, false, opt);
    const Tensor expected = Tensor::from_float(c.to_float(), c.shape(), out, Layout::TILE);
    ASSERT_EQ(c.size_bytes(), expected.size_bytes());
    EXPECT_EQ(std::memcmp(c.data<std::byte>(), expected.data<std::byte>(), c.size_bytes()), 0);
  }
}

TEST(KernelsMatmul, PortableAndVectorPathsAgree) {
  const Tensor a = Tensor::from_float(normal_values(33 * 130, 8), Shape{33, 130}, DataType::FLOAT32, Layout::TILE);
  const Tensor b = Tensor::from_float(normal_values(130 * 77, 9), Shape{130, 77}, DataType::BFLOAT4_B, Layout::TILE);
  MatmulOptions portable;
  portable.force_portable = true;
  portable.output_dtype = DataType::FLOAT32;
  MatmulOptions fast = portable;
  fast.force_portable = false;
  EXPECT_GE(pcc(matmul(a, b, false, false, portable), matmul(a, b, false, false, fast)), 0.99999);
}

TEST(KernelsMatmul, ValidationNamesTheValues) {
  const Tensor a = Tensor::from_float(normal_values(4 * 8, 1), Shape{4, 8}, DataType::FLOAT32, Layout::TILE);
  const Tensor b = Tensor::from_float(normal_values(9 * 5, 1), Shape{9, 5}, DataType::FLOAT32, Layout::TILE);
  try {
    matmul(a, b);
    FAIL() << "expected meshnn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("K=8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("K=9"), std::string::npos) << e.what();
  }
  const Tensor a3 = Tensor::from_float(normal_values(2 * 4 * 9, 1), Shape{2, 4, 9}, DataType::FLOAT32, Layout::TILE);
  const Tensor b3 = Tensor::from_float(normal_values(3 * 9 * 5, 1), Shape{3, 9, 5}, DataType::FLOAT32, Layout::TILE);
  EXPECT_THROW(matmul(a3, b3), Error);
  const Tensor rm = Tensor::from_float(normal_values(4 * 8, 1), Shape{4, 8}, DataType::FLOAT32, Layout::ROW_MAJOR);
  EXPECT_THROW(matmul(rm, rm), Error);
  const Tensor bias = Tensor::from_float(normal_values(4, 1), Shape{4}, DataType::FLOAT32, Layout::ROW_MAJOR);
  const Tensor w = Tensor::from_float(normal_values(8 * 5, 1), Shape{8, 5}, DataType::FLOAT32, Layout::TILE);
  EXPECT_THROW(linear(a, w, &bias), Error);
}

// --- pcc -------------------------------------------------------------------------------------

TEST(KernelsPcc, TtnnConventions) {
  const float nan = std::nanf(""), inf = INFINITY;
  const std::vector<float> x{1, 2, 3, 4}, y{2, 4, 6, 8.5f}, z{0, 0, 0, 0}, n{nan, nan, nan, nan};
  EXPECT_EQ(pcc(n, n), 1.0);
  EXPECT_EQ(pcc(n, x), 0.0);
  EXPECT_EQ(pcc(x, n), 0.0);
  EXPECT_EQ(pcc(z, x), 0.0);
  EXPECT_EQ(pcc(x, z), 0.0);
  EXPECT_EQ(pcc(z, z), 1.0);
  EXPECT_EQ(pcc(x, x), 1.0);
  // NaN/inf zeroed before comparing: {1, NaN} and {1, inf} both become {1, 0}.
  EXPECT_EQ(pcc(std::vector<float>{1, nan, 3}, std::vector<float>{1, inf, 3}), 1.0);
  // Constant inputs: equal -> 1, unequal -> 0.
  EXPECT_EQ(pcc(std::vector<float>{2, 2, 2}, std::vector<float>{2, 2, 2}), 1.0);
  EXPECT_EQ(pcc(std::vector<float>{2, 2, 2}, std::vector<float>{3, 3, 3}), 0.0);
  // General case in float64.
  double mx = 2.5, my = 5.125, sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < 4; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  EXPECT_NEAR(pcc(x, y), sxy / std::sqrt(sxx * syy), 1e-15);
  EXPECT_NEAR(pcc(x, std::vector<float>{4, 3, 2, 1}), -1.0, 1e-15);
  EXPECT_THROW(pcc(x, std::vector<float>{1, 2}), Error);
}

TEST(KernelsPcc, TensorOverloadChecksShapes) {
  const Tensor a =
      Tensor::from_float(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, DataType::FLOAT32, Layout::TILE);
  const Tensor b = a.typecast(DataType::BFLOAT16);
  EXPECT_EQ(pcc(a, b), 1.0);
  const Tensor c =
      Tensor::from_float(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2}, DataType::FLOAT32, Layout::TILE);
  EXPECT_THROW(pcc(a, c), Error);
}

// A row window of b (b_row_begin) gives the bits of the same rows sliced out, on every weight
// dtype, both activation dtypes, 1 and 5 rows, K a multiple of 32 or not (then a's zero padding
// meets the rows after the window); a window that does not fit is an error naming it.
TEST(KernelsMatmul, RowWindowOfBMatchesTheSlicedRows) {
  for (DataType act : {DataType::FLOAT32, DataType::BFLOAT16})
    for (DataType weight : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B})
      for (int64_t m : {1, 5, 40})
        for (auto [begin, k] : {std::pair<int64_t, int64_t>{0, 64}, {64, 64}, {128, 50}, {32, 146}}) {
          const Tensor b = testing::seeded_tensor(Shape{178, 96}, weight, Layout::TILE, 3);
          const Tensor a = testing::seeded_tensor(Shape{m, k}, act, Layout::TILE, 4);
          MatmulOptions window;
          window.output_dtype = DataType::FLOAT32;
          MatmulOptions sliced = window;
          window.b_row_begin = begin;
          const Tensor rows = slice(b, 0, begin, begin + k);
          EXPECT_TRUE(testing::bitwise_equal(matmul(a, b, false, false, window), matmul(a, rows, false, false, sliced)))
              << to_string(act) << " x " << to_string(weight) << " m " << m << " rows [" << begin << ", " << begin + k
              << ")";
        }
  const Tensor b = testing::seeded_tensor(Shape{128, 64}, DataType::BFLOAT16, Layout::TILE, 3);
  const Tensor a = testing::seeded_tensor(Shape{4, 64}, DataType::FLOAT32, Layout::TILE, 4);
  for (int64_t begin : {16, 96, -32}) {
    MatmulOptions o;
    o.b_row_begin = begin;
    const std::string message = testing::error_message_of([&] { matmul(a, b, false, false, o); });
    EXPECT_NE(message.find("rows [" + std::to_string(begin)), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace meshnn
