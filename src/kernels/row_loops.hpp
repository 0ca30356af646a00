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

// Per call the work is tiny (a 64-dim head: 32 x 64 multiply-adds each way), so what decides its
// speed is latency: the sums run as eight independent chains of vectors (the dims split
// kLanes / 4 ways for the scores, the positions two ways for the values) combined in a fixed
// order at the end. The order depends on kLanes, so the instruction sets differ in the last bits.
template <int kLanes>
void attend_tile_loop(const float* __restrict q, const float* __restrict keys_t, const float* __restrict values,
                      int64_t d, int64_t values_stride, int first, int last, float scale, float* __restrict acc,
                      float* running_max, float* running_sum) {
  using Vec = FloatVec<kLanes>;
  static_assert(sizeof(Vec) == 4 * kLanes);
  constexpr int kPositions = 32, kPositionVecs = kPositions / kLanes, kDimChains = kLanes / 4;
  // Scores of all 32 positions at once (the keys are transposed for this): per dim, one multiply-add
  // across the lanes; positions outside [first, last] are computed and ignored.
  Vec chains[kDimChains][kPositionVecs] = {};
  int64_t i = 0;
  for (; i + kDimChains <= d; i += kDimChains)
    for (int c = 0; c < kDimChains; ++c) {
      const float qi = q[i + c];
      for (int v = 0; v < kPositionVecs; ++v)
        chains[c][v] += qi * load_vec<kLanes>(keys_t + (i + c) * kPositions + v * kLanes);
    }
  for (; i < d; ++i)
    for (int v = 0; v < kPositionVecs; ++v)
      chains[0][v] += q[i] * load_vec<kLanes>(keys_t + i * kPositions + v * kLanes);
  alignas(64) float s[kPositions];
  for (int v = 0; v < kPositionVecs; ++v) {
    for (int width = kDimChains / 2; width >= 1; width /= 2)
      for (int c = 0; c < width; ++c) chains[c][v] += chains[c + width][v];
    store_vec<kLanes>(s + v * kLanes, chains[0][v]);
  }
  float tile_max = -std::numeric_limits<float>::infinity();
  for (int j = first; j <= last; ++j) {
    s[j] *= scale;
    tile_max = std::max(tile_max, s[j]);
  }
  // Online softmax: what was accumulated under the old maximum is rescaled to the new one.
  const float new_max = std::max(*running_max, tile_max);
  const float correction = std::exp(*running_max - new_max);
  alignas(64) float p[kPositions], folded[kPositions];
  for (int j = 0; j < kPositions; ++j) {
    const float e = exp_lane(s[j] - new_max);
    p[j] = j >= first && j <= last ? e : 0.0f;
    folded[j] = p[j];
  }
  for (int width = kPositions / 2; width >= 1; width /= 2)
    for (int j = 0; j < width; ++j) folded[j] += folded[j + width];
  *running_sum = *running_sum * correction + folded[0];
  *running_max = new_max;
  // acc = (acc * correction + the even positions' values) + the odd positions', a block of four
  // vectors of dims at a time held in registers, over whole pairs of positions: a pair's position
  // outside [first, last] has p = 0 and reads a row inside instead (rows outside may hold
  // anything, even NaN, and 0 x NaN is NaN).
  const int pair_begin = first / 2 * 2, pair_end = last / 2 * 2 + 2;
  const auto row = [&](int j) { return values + std::min(std::max(j, first), last) * values_stride; };
  const auto weight = [&](int j) { return j < kPositions ? p[j] : 0.0f; };
  constexpr int kBlockVecs = 4, kBlock = kBlockVecs * kLanes;
  int64_t i0 = 0;
  for (; i0 + kBlock <= d; i0 += kBlock) {
    Vec even[kBlockVecs] = {}, odd[kBlockVecs] = {};
    for (int j = pair_begin; j < pair_end; j += 2) {
      const float *v0 = row(j) + i0, *v1 = row(j + 1) + i0;
      const float p0 = weight(j), p1 = weight(j + 1);
      for (int b = 0; b < kBlockVecs; ++b) {
        even[b] += p0 * load_vec<kLanes>(v0 + kLanes * b);
        odd[b] += p1 * load_vec<kLanes>(v1 + kLanes * b);
      }
    }
    for (int b = 0; b < kBlockVecs; ++b) {
      float* a = acc + i0 + kLanes * b;
      store_vec<kLanes>(a, (load_vec<kLanes>(a) * correction + even[b]) + odd[b]);
    }
  }
  for (; i0 < d; ++i0) {  // a head_dim that is not a multiple of the block
    float even = 0.0f, odd = 0.0f;
    for (int j = pair_begin; j < pair_end; j += 2) {
      even += weight(j) * row(j)[i0];
      odd += weight(j + 1) * row(j + 1)[i0];
    }
    acc[i0] = (acc[i0] * correction + even) + odd;
  }
}

}  // namespace
}  // namespace meshnn::kernels
