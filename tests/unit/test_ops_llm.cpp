// The LLM op set against float64 references written here, independently of src/ops.
// Tolerances: these ops compute in float32 (float64 sums) and round once to the output dtype, so
// for float32 outputs a few float32 ulps of the value (or of the row's scale for sums: 1e-5
// relative here, ~ 2^-24 * row length * small factor), and for bfloat16 outputs 2^-8 |ref| more.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/ops/attention.hpp"
#include "meshnn/ops/data_movement.hpp"
#include "meshnn/ops/eltwise.hpp"
#include "meshnn/ops/embedding.hpp"
#include "meshnn/ops/normalization.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/tensor/tensor.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::normal_values;

Tensor f32(const std::vector<float>& v, const Shape& s, Layout layout = Layout::TILE) {
  return Tensor::from_float(v, s, DataType::FLOAT32, layout);
}

// Max over elements of |got - ref| / (rel * |ref| + abs).
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rel, double abs,
                  const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int64_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = (std::isnan(ref[i]) && std::isnan(got[i])) || (ref[i] == got[i]) ||
                    std::fabs(got[i] - ref[i]) <= rel * std::fabs(ref[i]) + abs;
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": first bad element " << first << " got " << got[first] << " want " << ref[first];
}

constexpr double kUlp = 1.0 / (1 << 23);  // float32 ulp relative to |value| (upper bound)

// --- activations -----------------------------------------------------------------------------

TEST(OpsActivations, EdgeValuesMatchFloat64) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{-1e4f, -100.f, -20.f, -5.f, -1.f,  -1e-3f, 0.f,  1e-3f,
                       0.5f,  1.f,    3.f,   20.f, 100.f, 1e4f,   -inf, inf};
  const std::vector<float> r = normal_values(61, 3, 3.0f);
  x.insert(x.end(), r.begin(), r.end());
  const Shape s{static_cast<int64_t>(x.size())};
  std::vector<double> g, gt, si, re;
  for (float v : x) {
    const double d = v;
    g.push_back(std::isinf(d) ? (d > 0 ? d : 0.0) : 0.5 * d * std::erfc(-d / std::sqrt(2.0)));
    gt.push_back(std::isinf(d) ? (d > 0 ? d : 0.0)
                               : 0.5 * d * (1 + std::tanh(std::sqrt(2 / M_PI) * (d + 0.044715 * d * d * d))));
    si.push_back(std::isinf(d) ? (d > 0 ? d : 0.0) : d / (1 + std::exp(-d)));
    re.push_back(d > 0 ? d : 0);
  }
  for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
    const Tensor t = f32(x, s, layout);
    // erf-based gelu: 0.5 x (1 + erf) loses relative accuracy where 1 + erf(x/sqrt2) is tiny
    // (x < -5: the result is < 1e-6 in magnitude), hence the absolute term.
    expect_close(gelu(t).to_float(), g, 8 * kUlp, 1e-6, "gelu");
    expect_close(gelu(t, true).to_float(), gt, 8 * kUlp, 1e-6, "gelu tanh");
    expect_close(silu(t).to_float(), si, 8 * kUlp, 1e-30, "silu");
    expect_close(relu(t).to_float(), re, 0, 0, "relu");
    for (float v : gelu(t).to_float()) EXPECT_FALSE(std::isnan(v));
    for (float v : silu(t).to_float()) EXPECT_FALSE(std::isnan(v));
  }
  // bfloat16 in and out: one rounding of the result (2^-8 relative) on exactly representable input.
  const Tensor b = Tensor::from_float(x, s, DataType::BFLOAT16, Layout::TILE);
  std::vector<double> gb;
  for (float v : b.to_float())
    gb.push_back(std::isinf(v) ? (v > 0 ? v : 0.0) : 0.5 * v * std::erfc(-v / std::sqrt(2.0)));
  expect_close(gelu(b).to_float(), gb, std::ldexp(1.0, -8) + 8 * kUlp, 1e-6, "gelu bf16");
  EXPECT_EQ(gelu(b).dtype(), DataType::BFLOAT16);
}

// --- binary broadcasting -------------------------------------------------------------------------

TEST(OpsEltwise, BroadcastingAddSubMul) {
  const Shape as{2, 3, 37, 45}, bs{3, 1, 45};
  const std::vector<float> av = normal_values(as.volume(), 1), bv = normal_values(bs.volume(), 2);
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B}) {
    const Tensor a = Tensor::from_float(av, as, dt, Layout::TILE);
    const Tensor b = Tensor::from_float(bv, bs, DataType::FLOAT32, Layout::ROW_MAJOR);
    const std::vector<float> aq = a.to_float();
    std::vector<double> rs, rd, rm;
    for (int64_t i0 = 0; i0 < 2; ++i0)
      for (int64_t i1 = 0; i1 < 3; ++i1)
        for (int64_t i2 = 0; i2 < 37; ++i2)
          for (int64_t i3 = 0; i3 < 45; ++i3) {
            const double x = aq[((i0 * 3 + i1) * 37 + i2) * 45 + i3], y = bv[i1 * 45 + i3];
            rs.push_back(x + y);
            rd.push_back(x - y);
            rm.push_back(x * y);
          }
    // Output keeps a's dtype: rounding to it adds its relative error (bfloat8_b: block-relative,
    // checked by PCC only).
    const double rel = dt == DataType::FLOAT32 ? kUlp : std::ldexp(1.0, -8);
    if (dt != DataType::BFLOAT8_B) {
      expect_close(add(a, b).to_float(), rs, rel, 1e-30, "add");
      expect_close(sub(a, b).to_float(), rd, rel, 1e-30, "sub");
      expect_close(mul(a, b).to_float(), rm, rel, 1e-30, "mul");
    } else {
      EXPECT_GE(pcc(std::vector<float>(rs.begin(), rs.end()), add(a, b).to_float()), 0.999);
    }
    EXPECT_EQ(add(a, b).shape(), as);
    EXPECT_EQ(add(a, b).dtype(), dt);
  }
  EXPECT_THROW(add(f32(av, as), f32(normal_values(4, 1), Shape{4})), Error);
}

// Same shapes go row by row in the stored layout, or (TILE, a width that fills its tiles) whole
// tile rows where all 32 rows are real and row by row for the rest: values as float64 says, in
// a's dtype, the tile padding stays 0 even where the inputs' padding is not, and the residual
// stream's in-place update gives the same bits.
TEST(OpsEltwise, SameShapesMatchFloat64AndKeepPaddingZero) {
  for (const Shape& s : {Shape{2, 3, 37, 45}, Shape{2, 70, 96}}) {
    const std::vector<float> av = normal_values(s.volume(), 11), bv = normal_values(s.volume(), 12);
    for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
      for (Layout layout : {Layout::TILE, Layout::ROW_MAJOR}) {
        SCOPED_TRACE(::testing::Message() << s.to_string() << " " << to_string(dt) << " " << to_string(layout));
        const Tensor a = Tensor::from_float(av, s, dt, layout, /*pad_value=*/7.0f);
        const Tensor b = Tensor::from_float(bv, s, DataType::FLOAT32, Layout::TILE, /*pad_value=*/-3.0f);
        const std::vector<float> aq = a.to_float();
        std::vector<double> sum(aq.size()), product(aq.size());
        for (size_t i = 0; i < aq.size(); ++i) {
          sum[i] = double(aq[i]) + bv[i];
          product[i] = double(aq[i]) * bv[i];
        }
        const double rel = dt == DataType::FLOAT32 ? kUlp : std::ldexp(1.0, -8);
        const Tensor out = add(a, b);
        expect_close(out.to_float(), sum, rel, 1e-30, "add");
        expect_close(mul(a, b).to_float(), product, rel, 1e-30, "mul");
        EXPECT_EQ(out.dtype(), dt);
        EXPECT_EQ(out.layout(), layout);
        // Every stored element outside the logical values is padding, and it is 0.
        const Tensor padded_zero = Tensor::from_float(out.to_float(), s, dt, layout, 0.0f);
        EXPECT_TRUE(std::equal(out.bytes().begin(), out.bytes().end(), padded_zero.bytes().begin()));
        Tensor residual = Tensor::from_float(av, s, dt, layout);
        add_into(residual, b, residual);
        EXPECT_EQ(residual.to_float(), out.to_float()) << "in place";
      }
  }
}

TEST(OpsNorm, RmsNormRowPathOverTilesAndBatches) {
  const Shape s{2, 37, 70};
  const std::vector<float> x = normal_values(s.volume(), 13), g = normal_values(70, 14);
  const Tensor tg = f32(g, Shape{70}, Layout::ROW_MAJOR);
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16}) {
    const Tensor tx = Tensor::from_float(x, s, dt, Layout::TILE, 5.0f);
    const std::vector<float> xq = tx.to_float();
    std::vector<double> expected;
    for (int64_t r = 0; r < 2 * 37; ++r) {
      double sq = 0;
      for (int64_t i = 0; i < 70; ++i) sq += double(xq[r * 70 + i]) * xq[r * 70 + i];
      for (int64_t i = 0; i < 70; ++i) expected.push_back(xq[r * 70 + i] / std::sqrt(sq / 70 + 1e-5) * g[i]);
    }
    const Tensor y = rms_norm(tx, 1e-5f, &tg);
    expect_close(y.to_float(), expected, dt == DataType::FLOAT32 ? 16 * kUlp : std::ldexp(1.0, -8), 1e-6, "rms_norm");
    const Tensor padded_zero = Tensor::from_float(y.to_float(), s, dt, Layout::TILE, 0.0f);
    EXPECT_TRUE(std::equal(y.bytes().begin(), y.bytes().end(), padded_zero.bytes().begin())) << to_string(dt);
  }
}

// Qwen3's per-head norm: in a q|k-like row (40 columns, then 3 heads of 20 from column 45, then 5
// more), each head is normalised on its own in float64 here; the columns around the heads, and the
// tile padding, are left exactly as they were.
TEST(OpsNorm, RmsNormHeadsNormalisesEachHeadInPlace) {
  const int64_t d = 20, first = 45, heads = 3, w = first + heads * d + 5;
  const Shape s{1, 35, w};
  const std::vector<float> x = normal_values(s.volume(), 21), g = normal_values(d, 22);
  const Tensor tg = f32(g, Shape{d}, Layout::ROW_MAJOR);
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16})
    for (Layout layout : {Layout::TILE, Layout::ROW_MAJOR}) {
      Tensor t = Tensor::from_float(x, s, dt, layout, 7.0f);
      const std::vector<float> before = t.to_float();
      std::vector<double> expected(before.begin(), before.end());
      for (int64_t r = 0; r < s[1]; ++r)
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t base = r * w + first + h * d;
          double sq = 0;
          for (int64_t i = 0; i < d; ++i) sq += double(before[base + i]) * before[base + i];
          for (int64_t i = 0; i < d; ++i) expected[base + i] = before[base + i] / std::sqrt(sq / d + 1e-6) * g[i];
        }
      rms_norm_heads_in_place(t, first, heads, tg, 1e-6f);
      expect_close(t.to_float(), expected, dt == DataType::FLOAT32 ? 16 * kUlp : std::ldexp(1.0, -8), 1e-6,
                   "rms_norm_heads");
      if (layout == Layout::TILE) {  // the padding keeps its 7s
        const Tensor padded = Tensor::from_float(t.to_float(), s, dt, Layout::TILE, 7.0f);
        EXPECT_TRUE(std::equal(t.bytes().begin(), t.bytes().end(), padded.bytes().begin())) << to_string(dt);
      }
    }
  Tensor t = f32(x, s);
  EXPECT_THROW(rms_norm_heads_in_place(t, first, heads + 1, tg, 1e-6f), Error);  // runs past the last dim
  Tensor ints(s, DataType::UINT32, Layout::ROW_MAJOR);
  EXPECT_THROW(rms_norm_heads_in_place(ints, 0, 1, tg, 1e-6f), Error);
}

// swiglu on a fused gate|up row: silu(gate) * up in float64, on both paths (rows for float32 and
// bfloat16 outputs, whole tiles for block floats); padding columns and rows are 0.
TEST(OpsEltwise, SwigluOfFusedGateUpMatchesFloat64) {
  const int64_t rows = 37, width = 200, half = 224;
  const std::vector<float> v = normal_values(rows * 2 * half, 15, 4.0f);
  const Tensor gate_up = f32(v, Shape{1, rows, 2 * half});
  std::vector<double> expected;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      const double g = v[r * 2 * half + c], u = v[r * 2 * half + half + c];
      expected.push_back(g / (1.0 + std::exp(-g)) * u);
    }
  for (DataType dt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B}) {
    const Tensor y = swiglu(gate_up, half, width, dt);
    EXPECT_EQ(y.shape(), (Shape{1, rows, width}));
    if (dt == DataType::BFLOAT8_B) {
      EXPECT_GE(pcc(std::vector<float>(expected.begin(), expected.end()), y.to_float()), 0.999);
    } else {
      expect_close(y.to_float(), expected, dt == DataType::FLOAT32 ? 8 * kUlp : std::ldexp(1.0, -8), 1e-6, "swiglu");
      const Tensor padded_zero = Tensor::from_float(y.to_float(), y.shape(), dt, Layout::TILE, 0.0f);
      EXPECT_TRUE(std::equal(y.bytes().begin(), y.bytes().end(), padded_zero.bytes().begin())) << to_string(dt);
    }
  }
  EXPECT_THROW(swiglu(gate_up, 200, 200, DataType::FLOAT32), Error);  // half width not whole tiles
}

TEST(OpsEltwise, TypecastRoundTrips) {
  const std::vector<float> v = normal_values(33 * 40, 4);
  const Tensor t = f32(v, Shape{33, 40});
  const Tensor b = typecast(t, DataType::BFLOAT16);
  EXPECT_EQ(b.dtype(), DataType::BFLOAT16);
  EXPECT_EQ(typecast(b, DataType::FLOAT32).to_float(), b.to_float());
  EXPECT_GE(pcc(t, typecast(t, DataType::BFLOAT8_B)), 0.999);
  EXPECT_THROW(typecast(f32(v, Shape{33, 40}, Layout::ROW_MAJOR), DataType::BFLOAT8_B), Error);
}

// --- normalisation and softmax -----------------------------------------------------------------

TEST(OpsNorm, RmsAndLayerNormWithResidualMatchFloat64) {
  const int64_t rows = 7, w = 70;
  const Shape s{1, rows, w};
  // Rows offset by 100 so a one-pass variance would lose digits.
  std::vector<float> x = normal_values(rows * w, 5), res = normal_values(rows * w, 6), g = normal_values(w, 7),
                     bias = normal_values(w, 8);
  for (float& e : x) e += 100.0f;
  const Tensor tx = f32(x, s), tr = f32(res, s), tg = f32(g, Shape{w}, Layout::ROW_MAJOR),
               tb = f32(bias, Shape{1, w}, Layout::ROW_MAJOR);
  std::vector<double> rms, ln;
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0, mean = 0, var = 0;
    std::vector<double> h(w);
    for (int64_t i = 0; i < w; ++i) {
      h[i] = double(x[r * w + i]) + res[r * w + i];
      sq += h[i] * h[i];
      mean += h[i];
    }
    mean /= w;
    for (int64_t i = 0; i < w; ++i) var += (h[i] - mean) * (h[i] - mean);
    var /= w;
    for (int64_t i = 0; i < w; ++i) {
      rms.push_back(h[i] / std::sqrt(sq / w + 1e-5) * g[i]);
      ln.push_back((h[i] - mean) / std::sqrt(var + 1e-5) * g[i] + bias[i]);
    }
  }
  // The residual sum is rounded to float32 first (2^-24 * 100 absolute on h ~ 100, amplified by
  // 1/std ~ 1 in layer_norm): 1e-5 absolute covers it.
  expect_close(rms_norm(tx, 1e-5f, &tg, &tr).to_float(), rms, 16 * kUlp, 1e-6, "rms_norm");
  expect_close(layer_norm(tx, 1e-5f, &tg, &tb, &tr).to_float(), ln, 16 * kUlp, 2e-5, "layer_norm");
  const Tensor short_weight = f32(normal_values(w - 1, 1), Shape{w - 1}, Layout::ROW_MAJOR);
  EXPECT_THROW(rms_norm(tx, 1e-5f, &short_weight, &tr), Error);
  const Tensor wrong = f32(res, Shape{rows, w});
  EXPECT_THROW(layer_norm(tx, 1e-5f, &tg, &tb, &wrong), Error);
}

TEST(OpsSoftmax, StableWithMasksAndLargeValues) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t rows = 5, n = 37;
  std::vector<float> x = normal_values(rows * n, 9, 10.0f);
  for (int64_t i = 0; i < n; ++i) x[0 * n + i] += 1e4f;                   // large values: exp would overflow
  for (int64_t i = n / 2; i < n; ++i) x[1 * n + i] = ninf;                // causal-style mask
  for (int64_t i = 0; i < n; ++i) x[2 * n + i] = (i == 3) ? 5.0f : ninf;  // one survivor -> exactly 1
  for (int64_t i = 0; i < n; ++i) x[4 * n + i] = ninf;                    // all masked -> NaN (torch)
  std::vector<double> ref;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(x[r * n + i]));
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[r * n + i]) - mx);
    for (int64_t i = 0; i < n; ++i) ref.push_back(r == 4 ? NAN : std::exp(double(x[r * n + i]) - mx) / sum);
  }
  const std::vector<float> got = softmax(f32(x, Shape{rows, n})).to_float();
  // exp of a float32 argument: ~2 ulp, times |x - max| up to ~80 -> relative ~ 80 * 2^-24 per term.
  expect_close(got, ref, 1e-5, 1e-30, "softmax");
  EXPECT_EQ(got[2 * n + 3], 1.0f);
  EXPECT_EQ(got[1 * n + n - 1], 0.0f);
  // dim = 0 equals softmax of the transpose.
  const std::vector<float> y = normal_values(6 * 9, 10);
  const Tensor ty = f32(y, Shape{6, 9});
  const int perm[] = {1, 0};
  EXPECT_EQ(permute(softmax(ty, 0), perm).to_float(), softmax(permute(ty, perm), -1).to_float());
}

// --- embedding and rotary ------------------------------------------------------------------------

TEST(OpsEmbedding, GathersRowsAndChecksIds) {
  const int64_t vocab = 50, d = 40;
  const std::vector<float> table = normal_values(vocab * d, 11);
  const Tensor t = Tensor::from_float(table, Shape{vocab, d}, DataType::BFLOAT16, Layout::ROW_MAJOR);
  const std::vector<uint32_t> ids{3, 0, 49, 3, 17};
  const Tensor e = embedding(Tensor::from_uint32(ids, Shape{1, 5}, Layout::ROW_MAJOR), t);
  EXPECT_EQ(e.shape(), (Shape{1, 5, d}));
  EXPECT_EQ(e.layout(), Layout::TILE);
  const std::vector<float> got = e.to_float(), tq = t.to_float();
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < d; ++j) EXPECT_EQ(got[i * d + j], tq[ids[i] * d + j]);
  const std::vector<uint32_t> bad{1, 50};
  EXPECT_THROW(embedding(Tensor::from_uint32(bad, Shape{2}, Layout::ROW_MAJOR), t), Error);
}

// HF: q_embed = q * cos + rotate_half(q) * sin with cos = cat(freqs, freqs).cos().
double rotary_ref(const std::vector<float>& x, int64_t row, int64_t i, int64_t d, int64_t pos) {
  const int64_t half = d / 2, fi = i % half;
  const double angle = pos * std::pow(10000.0, -2.0 * fi / d);
  const double rot = i < half ? -double(x[row * d + i + half]) : double(x[row * d + i - half]);
  return x[row * d + i] * std::cos(angle) + rot * std::sin(angle);
}

TEST(OpsRotary, PrefillWithOffsetAndDecodeMatchHf) {
  const int64_t d = 64, seq = 19, heads = 3, offset = 5;
  const RotaryTables tables = make_rotary_tables(d, 128);
  const std::vector<float> x = normal_values(heads * seq * d, 12);
  const Tensor tx = f32(x, Shape{1, heads, seq, d});
  std::vector<double> ref;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t i = 0; i < d; ++i) ref.push_back(rotary_ref(x, h * seq + s, i, d, offset + s));
  // Angles up to ~130 rad: the float32 tables carry ~2^-24 * 130 absolute error in cos/sin.
  expect_close(rotary_embedding(tx, tables.cos, tables.sin, offset).to_float(), ref, 4 * kUlp, 2e-5, "rotary");
  EXPECT_THROW(rotary_embedding(tx, tables.cos, tables.sin, 120), Error);

  // Decode: users at their own positions.
  const int64_t users = 4;
  const std::vector<int64_t> pos{0, 7, 31, 100};
  const std::vector<float> xd = normal_values(users * heads * d, 13);
  std::vector<double> refd;
  for (int64_t u = 0; u < users; ++u)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d; ++i) refd.push_back(rotary_ref(xd, u * heads + h, i, d, pos[u]));
  expect_close(rotary_embedding_decode(f32(xd, Shape{1, users, heads, d}), tables.cos, tables.sin, pos).to_float(),
               refd, 4 * kUlp, 2e-5, "rotary decode");
}

// --- attention -----------------------------------------------------------------------------------

// Naive float64 attention over [B, H, S, D] values with GQA and a bottom-right causal mask.
std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, int64_t b, int64_t hq, int64_t hkv, int64_t s,
                                    int64_t skv, int64_t d, bool causal, const std::vector<int64_t>* limit = nullptr) {
  std::vector<double> out(b * hq * s * d, 0.0);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / (hq / hkv);
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> sc(skv);
        double mx = -INFINITY;
        const int64_t last = limit ? (*limit)[bi] : (causal ? i + skv - s : skv - 1);
        for (int64_t j = 0; j <= last; ++j) {
          double dd = 0;
          for (int64_t t = 0; t < d; ++t)
            dd += double(q[((bi * hq + h) * s + i) * d + t]) * k[((bi * hkv + kh) * skv + j) * d + t];
          sc[j] = dd / std::sqrt(double(d));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= last; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
        for (int64_t j = 0; j <= last; ++j)
          for (int64_t t = 0; t < d; ++t)
            out[((bi * hq + h) * s + i) * d + t] += sc[j] / sum * v[((bi * hkv + kh) * skv + j) * d + t];
      }
    }
  return out;
}

TEST(OpsAttention, PrefillCausalGqaMatchesNaiveFloat64) {
  const int64_t b = 2, hq = 4, hkv = 2, s = 21, d = 40;
  const std::vector<float> q = normal_values(b * hq * s * d, 14), k = normal_values(b * hkv * s * d, 15),
                           v = normal_values(b * hkv * s * d, 16);
  for (bool causal : {false, true}) {
    const Tensor out = scaled_dot_product_attention(f32(q, Shape{b, hq, s, d}), f32(k, Shape{b, hkv, s, d}),
                                                    f32(v, Shape{b, hkv, s, d}), causal);
    // Scores ~ N(0, 1): float32 dot of 40 terms and exp give ~1e-6 relative; outputs are convex
    // combinations of |v| <~ 4, so 1e-5 absolute.
    expect_close(out.to_float(), naive_attention(q, k, v, b, hq, hkv, s, s, d, causal), 1e-5, 1e-5,
                 causal ? "causal" : "full");
  }
  // More keys than queries (chunked prefill): the queries are the last S positions.
  const int64_t skv = 30;
  const std::vector<float> k2 = normal_values(b * hkv * skv * d, 17), v2 = normal_values(b * hkv * skv * d, 18);
  const Tensor out = scaled_dot_product_attention(f32(q, Shape{b, hq, s, d}), f32(k2, Shape{b, hkv, skv, d}),
                                                  f32(v2, Shape{b, hkv, skv, d}), true);
  expect_close(out.to_float(), naive_attention(q, k2, v2, b, hq, hkv, s, skv, d, true), 1e-5, 1e-5, "chunked");
  EXPECT_THROW(scaled_dot_product_attention(f32(q, Shape{b, hq, s, d}), f32(k, Shape{b, 3, 7, d}),
                                            f32(k, Shape{b, 3, 7, d}), false),
               Error);
}

TEST(OpsAttention, DecodeAgainstCacheAtPerUserPositions) {
  const int64_t b = 3, hq = 8, hkv = 2, smax = 40, d = 32;
  const std::vector<int64_t> pos{0, 17, 39};
  for (DataType cache_dt : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B}) {
    SCOPED_TRACE(to_string(cache_dt));
    const std::vector<float> k0 = normal_values(b * hkv * smax * d, 19), v0 = normal_values(b * hkv * smax * d, 20);
    Tensor kc = Tensor::from_float(k0, Shape{b, hkv, smax, d}, cache_dt, Layout::TILE);
    Tensor vc = Tensor::from_float(v0, Shape{b, hkv, smax, d}, cache_dt, Layout::TILE);
    const Tensor k_before = kc;
    // New token per user written at its position; every other row keeps its bits.
    const std::vector<float> kn = normal_values(b * hkv * d, 21), vn = normal_values(b * hkv * d, 22);
    update_cache(kc, f32(kn, Shape{1, b, hkv, d}), pos);
    update_cache(vc, f32(vn, Shape{1, b, hkv, d}), pos);
    const std::vector<float> kq = kc.to_float(), kb = k_before.to_float(), vq = vc.to_float();
    const std::vector<float> knq = Tensor::from_float(kn, Shape{1, b, hkv, d}, cache_dt, Layout::TILE).to_float();
    int64_t changed_elsewhere = 0;
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t r = 0; r < smax; ++r)
          for (int64_t t = 0; t < d; ++t) {
            const int64_t idx = ((bi * hkv + h) * smax + r) * d + t;
            if (r == pos[bi])
              EXPECT_EQ(kq[idx], knq[(bi * hkv + h) * d + t]);
            else if (kq[idx] != kb[idx])
              ++changed_elsewhere;
          }
    EXPECT_EQ(changed_elsewhere, 0);

    const std::vector<float> q = normal_values(b * hq * d, 23);
    const Tensor out = scaled_dot_product_attention_decode(f32(q, Shape{1, b, hq, d}), kc, vc, pos);
    EXPECT_EQ(out.shape(), (Shape{1, b, hq, d}));
    expect_close(out.to_float(), naive_attention(q, kq, vq, b, hq, hkv, 1, smax, d, false, &pos), 1e-5, 1e-5, "decode");
  }
  const std::vector<int64_t> bad{0, 17, 40};
  const Tensor kc = f32(normal_values(b * hkv * smax * d, 1), Shape{b, hkv, smax, d});
  EXPECT_THROW(scaled_dot_product_attention_decode(f32(normal_values(b * hq * d, 2), Shape{1, b, hq, d}), kc, kc, bad),
               Error);
}

TEST(OpsAttention, FillCacheWritesOneUsersPrefix) {
  const int64_t b = 2, hkv = 2, smax = 64, d = 32, s = 37;
  Tensor cache(Shape{b, hkv, smax, d}, DataType::BFLOAT8_B, Layout::TILE);
  const std::vector<float> kv = normal_values(hkv * s * d, 24);
  fill_cache(cache, f32(kv, Shape{1, hkv, s, d}), 1);
  const std::vector<float> c = cache.to_float();
  const std::vector<float> kvq =
      Tensor::from_float(kv, Shape{1, hkv, s, d}, DataType::BFLOAT8_B, Layout::TILE).to_float();
  for (int64_t h = 0; h < hkv; ++h)
    for (int64_t r = 0; r < smax; ++r)
      for (int64_t t = 0; t < d; ++t) {
        EXPECT_EQ(c[((0 * hkv + h) * smax + r) * d + t], 0.0f);
        EXPECT_EQ(c[((1 * hkv + h) * smax + r) * d + t], r < s ? kvq[(h * s + r) * d + t] : 0.0f);
      }
}

// --- heads and data movement ---------------------------------------------------------------------

TEST(OpsHeads, SplitAndConcatRoundTrip) {
  const int64_t b = 2, s = 9, hq = 4, hkv = 2, d = 8;
  const std::vector<float> x = normal_values(b * s * (hq + 2 * hkv) * d, 25);
  const Tensor qkv = f32(x, Shape{b, 1, s, (hq + 2 * hkv) * d});
  const QkvHeads heads = split_qkv_heads(qkv, hq, hkv);
  EXPECT_EQ(heads.q.shape(), (Shape{b, hq, s, d}));
  EXPECT_EQ(heads.k.shape(), (Shape{b, hkv, s, d}));
  const std::vector<float> q = heads.q.to_float(), v = heads.v.to_float();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t si = 0; si < s; ++si)
        for (int64_t t = 0; t < d; ++t)
          EXPECT_EQ(q[((bi * hq + h) * s + si) * d + t], x[(bi * s + si) * (hq + 2 * hkv) * d + h * d + t]);
  EXPECT_EQ(v[0], x[(hq + hkv) * d]);
  const Tensor back = concat_heads(heads.q);
  EXPECT_EQ(back.shape(), (Shape{b, 1, s, hq * d}));
  EXPECT_EQ(split_heads(back, hq).to_float(), q);

  const Tensor dec = f32(normal_values(3 * (hq + 2 * hkv) * d, 26), Shape{1, 1, 3, (hq + 2 * hkv) * d});
  const QkvHeads hd = split_qkv_heads_decode(dec, hq, hkv);
  EXPECT_EQ(hd.q.shape(), (Shape{1, 3, hq, d}));
  EXPECT_EQ(hd.v.shape(), (Shape{1, 3, hkv, d}));
  EXPECT_EQ(concat_heads_decode(hd.q).shape(), (Shape{1, 1, 3, hq * d}));
}

TEST(OpsDataMovement, ReshapePermuteSlice) {
  const std::vector<float> x = normal_values(2 * 3 * 35, 27);
  for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
    const Tensor t = f32(x, Shape{2, 3, 35}, layout);
    const Tensor r = reshape(t, {6, -1});
    EXPECT_EQ(r.shape(), (Shape{6, 35}));
    EXPECT_EQ(r.to_float(), x);
    EXPECT_THROW(reshape(t, {4, 50}), Error);
    const int perm[] = {2, 0, 1};
    const std::vector<float> p = permute(t, perm).to_float();
    EXPECT_EQ(permute(t, perm).shape(), (Shape{35, 2, 3}));
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t k = 0; k < 35; ++k) EXPECT_EQ(p[(k * 2 + i) * 3 + j], x[(i * 3 + j) * 35 + k]);
    const int64_t begins[] = {1, 1, 3}, ends[] = {2, 3, 40};
    const Tensor sl = slice(t, begins, ends);
    EXPECT_EQ(sl.shape(), (Shape{1, 2, 32}));
    EXPECT_EQ(sl.to_float()[33], x[(1 * 3 + 2) * 35 + 4]);
  }
  const std::vector<uint32_t> ids{1, 2, 3, 4, 5, 4000000000u};
  EXPECT_EQ(reshape(Tensor::from_uint32(ids, Shape{6}, Layout::ROW_MAJOR), {2, 3}).to_uint32(), ids);
}

}  // namespace
}  // namespace meshnn
