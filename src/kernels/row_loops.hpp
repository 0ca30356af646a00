// Internal to src/kernels/row_kernels*.cpp: the loops of kernels/row_kernels.hpp, written once
// for the compiler to vectorise under each file's instruction flags (fixed-width inner loops,
// branch-free lane code, sums in a fixed order). Everything sits in an anonymous namespace for
// the reason isa_local.hpp gives: each including file is compiled with its own flags.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "meshnn/kernels/row_kernels.hpp"

namespace meshnn::kernels {
namespace {

// e^x to within 2 ulp, branch-free so that a loop of it vectorises: x = n ln2 + r with |r| <=
// ln2 / 2 (ln2 split in two for an exact n ln2), e^r from Cephes' degree-7 polynomial, 2^n built
// in the exponent bits. Out of range: +inf from 88.37 up (a little before float's own overflow at
// 88.72: n must stay <= 127), 0 below ln(FLT_MIN) (where e^x is denormal or 0); NaN stays NaN.
inline float exp_lane(float x) {
  constexpr float kHi = 88.37f;              // x log2(e) < 127.5: n rounds to 127 at most
  constexpr float kLo = -87.3365447505531f;  // ln(FLT_MIN): n stays >= -126
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: adding it rounds to an integer
  const float xc = std::min(std::max(x, kLo), kHi);
  const float t = xc * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  // The integer n sits in t's low mantissa bits (no float-to-int conversion: NaN is no UB).
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float y = p * std::bit_cast<float>(static_cast<uint32_t>(ni + 127) << 23);
  const float above = x > kHi ? std::numeric_limits<float>::infinity() : y;
  return x < kLo ? 0.0f : above;
}

void silu_mul_loop(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    // e^-g overflows to inf for g < -88.37: g / inf = -0, the limit; at g = -inf itself -0 too.
    const float silu = g / (1.0f + exp_lane(-g));
    out[i] = (g == -std::numeric_limits<float>::infinity() ? -0.0f : silu) * up[i];
  }
}

// kLanes floats as one value: GCC/Clang vector extensions, where the auto-vectoriser's choices
// proved fragile (it kept scalar copies of the position loops below for some trip counts). Each
// file picks the width of its registers: 16 (AVX-512), 8 (AVX2), 4 (baseline SSE2).
// (Spelled per width: GCC drops vector_size on an alias template whose size depends on its
// parameter, silently leaving a scalar.)
template <int kLanes>
struct FloatVecOf;
template <>
struct FloatVecOf<4> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct FloatVecOf<8> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct FloatVecOf<16> {
  typedef float type __attribute__((vector_size(64)));
};
template <int kLanes>
using FloatVec = typename FloatVecOf<kLanes>::type;

template <int kLanes>
inline FloatVec<kLanes> load_vec(const float* p) {
  FloatVec<kLanes> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int kLanes>
inline void store_vec(float* p, FloatVec<kLanes> v) {
  std::memcpy(p, &v, sizeof v);
}

inline float stored_value(float v) { return v; }
inline float stored_value(uint16_t bfloat16) { return std::bit_cast<float>(static_cast<uint32_t>(bfloat16) << 16); }

// The 32 value rows of one tile row as attend_heads reads them: kLanes values of dims [i, i + kLanes)
// of position j (i a multiple of kLanes), or one value.
// Float rows [32][stride] (attend_tile: the cache decoded first).
struct FloatValueRows {
  const float* rows;
  int64_t stride;
  template <int kLanes>
  FloatVec<kLanes> load(int j, int64_t i) const {
    return load_vec<kLanes>(rows + j * stride + i);
  }
  float at(int j, int64_t i) const { return rows[j * stride + i]; }
};
// The cache's own bfloat16 tiles (attend_tile_bf16), widened in registers: one 32 x 32 tile per 32
// dims, in TILE order (faces 0-3: positions 0-15 then 16-31, dims 0-15 then 16-31 of each), so a
// run of kLanes <= 16 dims of one position is a piece of one face row.
template <int kLanes>
struct U16VecOf;
template <>
struct U16VecOf<4> {
  typedef uint16_t type __attribute__((vector_size(8)));
  typedef uint32_t wide __attribute__((vector_size(16)));
};
template <>
struct U16VecOf<8> {
  typedef uint16_t type __attribute__((vector_size(16)));
  typedef uint32_t wide __attribute__((vector_size(32)));
};
template <>
struct U16VecOf<16> {
  typedef uint16_t type __attribute__((vector_size(32)));
  typedef uint32_t wide __attribute__((vector_size(64)));
};
struct Bf16ValueTiles {
  const uint16_t* tiles;
  static int64_t offset(int j, int64_t i) {
    return i / 32 * 1024 + ((j / 16) * 2 + i % 32 / 16) * 256 + j % 16 * 16 + i % 16;
  }
  template <int kLanes>
  FloatVec<kLanes> load(int j, int64_t i) const {
    typename U16VecOf<kLanes>::type bits;
    std::memcpy(&bits, tiles + offset(j, i), sizeof bits);
    // A float's top 16 bits: widen, shift, reinterpret (a vector cast keeps the bits).
    return (FloatVec<kLanes>)(__builtin_convertvector(bits, typename U16VecOf<kLanes>::wide) << 16);
  }
  float at(int j, int64_t i) const { return stored_value(tiles[offset(j, i)]); }
};

// kHeads query heads (of one KV head's group) against one tile row: each key and value vector is
// loaded once for all of them. Per call the work is small (a 64-dim head: 32 x 64 multiply-adds
// each way), so latency decides: the scores run as kHeads x (32 / kLanes) independent chains (8
// in attend_tile_loop's groups of kLanes / 4 heads, 16 in AVX-512's groups of 8), the value sums
// as kHeads x 4, at most 16 (16 with AVX-512, 8 with AVX2, 4 with SSE2). Every sum has a fixed
// order.
template <int kLanes, int kHeads, class Values>
void attend_heads(const float* __restrict q, const float* __restrict keys_t, Values values, int64_t d, int first,
                  int last, float scale, float* __restrict acc, float* __restrict running_max,
                  float* __restrict running_sum) {
  using Vec = FloatVec<kLanes>;
  static_assert(sizeof(Vec) == 4 * kLanes);
  constexpr int kPositions = 32, kPositionVecs = kPositions / kLanes;
  // Scores of all 32 positions at once (the keys are transposed for this): per dim, one multiply-add
  // across the lanes; positions outside [first, last] are computed and ignored.
  Vec scores[kHeads][kPositionVecs] = {};
  for (int64_t i = 0; i < d; ++i) {
    Vec k[kPositionVecs];
    for (int v = 0; v < kPositionVecs; ++v) k[v] = load_vec<kLanes>(keys_t + i * kPositions + v * kLanes);
    for (int h = 0; h < kHeads; ++h) {
      const float qi = q[h * d + i];
      for (int v = 0; v < kPositionVecs; ++v) scores[h][v] += qi * k[v];
    }
  }
  // Online softmax per head: what was accumulated under the old maximum is rescaled to the new one.
  // In vectors across the 32 positions, positions outside [first, last] masked by a select: the
  // scalar loops this replaced took as long as all the multiply-adds (docs/performance.md,
  // session 28). The sum folds in halves (16 apart, then 8, 4, 2, 1): the same order with any
  // vector width.
  alignas(64) float p[kHeads][kPositions];
  float correction[kHeads];
  Vec attended[kPositionVecs];  // lanes of positions in [first, last]: 1, else 0
  for (int v = 0; v < kPositionVecs; ++v)
    for (int l = 0; l < kLanes; ++l) {
      const int j = v * kLanes + l;
      attended[v][l] = j >= first && j <= last ? 1.0f : 0.0f;
    }
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (int h = 0; h < kHeads; ++h) {
    Vec s[kPositionVecs], highest = {};
    for (int v = 0; v < kPositionVecs; ++v) {
      s[v] = scores[h][v] * scale;
      const Vec candidate = attended[v] != 0.0f ? s[v] : kMinusInf;
      highest = v == 0 ? candidate : (candidate > highest ? candidate : highest);
    }
    float tile_max = kMinusInf;
    for (int l = 0; l < kLanes; ++l) tile_max = std::max(tile_max, highest[l]);
    const float new_max = std::max(running_max[h], tile_max);
    correction[h] = std::exp(running_max[h] - new_max);
    for (int v = 0; v < kPositionVecs; ++v) {
      alignas(64) float e[kLanes];
      for (int l = 0; l < kLanes; ++l) e[l] = exp_lane(s[v][l] - new_max);
      const Vec weights = attended[v] != 0.0f ? load_vec<kLanes>(e) : Vec{};
      store_vec<kLanes>(p[h] + v * kLanes, weights);
    }
    // The fold: whole vectors while the halves are at least a vector wide, then lane by lane.
    alignas(64) float folded[kPositions];
    std::copy_n(p[h], kPositions, folded);
    int width = kPositions / 2;
    for (; width >= kLanes; width /= 2)
      for (int j = 0; j < width; j += kLanes)
        store_vec<kLanes>(folded + j, load_vec<kLanes>(folded + j) + load_vec<kLanes>(folded + j + width));
    for (; width >= 1; width /= 2)
      for (int j = 0; j < width; ++j) folded[j] += folded[j + width];
    running_sum[h] = running_sum[h] * correction[h] + folded[0];
    running_max[h] = new_max;
  }
  // acc = acc * correction + the positions' values weighted by p, a block of four vectors of dims
  // (two for 8 heads: 16 sums in registers either way) at a time for every head. Only rows
  // [first, last] are read (rows outside may hold anything, even NaN).
  constexpr int kBlockVecs = kHeads * 4 <= 16 ? 4 : 16 / kHeads, kBlock = kBlockVecs * kLanes;
  int64_t i0 = 0;
  for (; i0 + kBlock <= d; i0 += kBlock) {
    Vec sum[kHeads][kBlockVecs] = {};
    for (int j = first; j <= last; ++j) {
      Vec v[kBlockVecs];
      for (int b = 0; b < kBlockVecs; ++b) v[b] = values.template load<kLanes>(j, i0 + kLanes * b);
      for (int h = 0; h < kHeads; ++h)
        for (int b = 0; b < kBlockVecs; ++b) sum[h][b] += p[h][j] * v[b];
    }
    for (int h = 0; h < kHeads; ++h)
      for (int b = 0; b < kBlockVecs; ++b) {
        float* a = acc + h * d + i0 + kLanes * b;
        store_vec<kLanes>(a, load_vec<kLanes>(a) * correction[h] + sum[h][b]);
      }
  }
  // A head_dim that is not a multiple of the block: one dim at a time, in explicit fused
  // multiply-adds. Left to the compiler, a*b+c was contracted for one value source and not for the
  // other, and the two sources must give the same bits.
  for (; i0 < d; ++i0)
    for (int h = 0; h < kHeads; ++h) {
      float sum = 0.0f;
      for (int j = first; j <= last; ++j) sum = std::fma(p[h][j], values.at(j, i0), sum);
      acc[h * d + i0] = std::fma(acc[h * d + i0], correction[h], sum);
    }
}

// Heads in groups of kLanes / 4 (eight score chains), the rest one by one. With AVX-512's 32
// registers, groups of 8 first (16 chains: each key and value vector loaded once for twice the
// heads; docs/performance.md, session 30). Each head's sums are the same in any group.
template <int kLanes, class Values>
void attend_groups(const float* q, int64_t heads, const float* keys_t, Values values, int64_t d, int first, int last,
                   float scale, float* acc, float* running_max, float* running_sum) {
  constexpr int kGroup = kLanes / 4, kWideGroup = kLanes == 16 ? 8 : kGroup;
  int64_t h = 0;
  for (; h + kWideGroup <= heads; h += kWideGroup)
    attend_heads<kLanes, kWideGroup>(q + h * d, keys_t, values, d, first, last, scale, acc + h * d, running_max + h,
                                     running_sum + h);
  for (; h + kGroup <= heads; h += kGroup)
    attend_heads<kLanes, kGroup>(q + h * d, keys_t, values, d, first, last, scale, acc + h * d, running_max + h,
                                 running_sum + h);
  for (; h < heads; ++h)
    attend_heads<kLanes, 1>(q + h * d, keys_t, values, d, first, last, scale, acc + h * d, running_max + h,
                            running_sum + h);
}

// RowKernelSet::attend_tile and attend_tile_bf16.
template <int kLanes>
void attend_tile_loop(const float* q, int64_t heads, const float* keys_t, const float* values, int64_t d,
                      int64_t values_stride, int first, int last, float scale, float* acc, float* running_max,
                      float* running_sum) {
  attend_groups<kLanes>(q, heads, keys_t, FloatValueRows{values, values_stride}, d, first, last, scale, acc,
                        running_max, running_sum);
}
template <int kLanes>
void attend_tile_bf16_loop(const float* q, int64_t heads, const float* keys_t, const uint16_t* value_tiles, int64_t d,
                           int first, int last, float scale, float* acc, float* running_max, float* running_sum) {
  attend_groups<kLanes>(q, heads, keys_t, Bf16ValueTiles{value_tiles}, d, first, last, scale, acc, running_max,
                        running_sum);
}

// RowKernelSet::transpose_tile(_bf16), one value at a time: each face's column c is a run of 16
// consecutive outputs. The AVX2 and AVX-512 sets transpose in registers instead.
template <class T>
void transpose_tile_loop(const T* tile, float* out) {
  for (int f = 0; f < 4; ++f) {
    const T* face = tile + f * 256;
    float* dst = out + (f % 2) * 16 * 32 + (f / 2) * 16;
    for (int c = 0; c < 16; ++c)
      for (int r = 0; r < 16; ++r) dst[c * 32 + r] = stored_value(face[r * 16 + c]);
  }
}

}  // namespace
}  // namespace meshnn::kernels
