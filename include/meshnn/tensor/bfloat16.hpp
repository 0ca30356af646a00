// bfloat16 = upper 16 bits of an IEEE float32, rounded to nearest even (torch's .to(bfloat16)).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace meshnn {

// Round-to-nearest-even; every NaN becomes the quiet NaN 0x7FC0; +-inf stay +-inf.
inline uint16_t float_to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float bfloat16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Whole-array forms (src and dst the same length).
void float_to_bfloat16(std::span<const float> src, std::span<uint16_t> dst);
void bfloat16_to_float(std::span<const uint16_t> src, std::span<float> dst);

}  // namespace meshnn
