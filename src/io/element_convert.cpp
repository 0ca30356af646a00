#include "meshnn/io/element_convert.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/bfloat16.hpp"

namespace meshnn::io {
namespace {

uint16_t load16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);  // the source may be unaligned (a safetensors header has any length)
  return v;
}

float load32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// IEEE half -> float, exact (subnormals, inf and NaN included).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu, bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

StoredType stored_type_of(const std::string& dtype, const std::string& tensor) {
  if (dtype == "F32") return StoredType::FLOAT32;
  if (dtype == "F16") return StoredType::FLOAT16;
  if (dtype == "BF16") return StoredType::BFLOAT16;
  throw Error(fmt::format("tensor '{}' is {}; meshnn-convert converts F32, F16 and BF16 weights", tensor, dtype));
}

size_t stored_size(StoredType t) {
  return t == StoredType::FLOAT32 || t == StoredType::INT32 ? 4 : t == StoredType::INT64 ? 8 : 2;
}

namespace {

// One loop per (from, to) pair with the element access inlined, so the compiler vectorises the
// common widenings and roundings instead of dispatching per element.
template <size_t In, class Load, class Store>
void convert_loop(const std::byte* src, std::byte* dst, size_t count, Load load, Store store) {
  for (size_t i = 0; i < count; ++i) store(dst, i, load(src + i * In));
}

}  // namespace

void convert_elements(StoredType from, const std::byte* src, StoredType to, std::byte* dst, size_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * stored_size(from));
    return;
  }
  MESHNN_CHECK(to == StoredType::FLOAT32 || to == StoredType::BFLOAT16, "cannot convert to {}", to_string(to));
  MESHNN_CHECK(from == StoredType::FLOAT32 || from == StoredType::FLOAT16 || from == StoredType::BFLOAT16,
               "cannot convert from {}", to_string(from));
  const auto store_f32 = [](std::byte* out, size_t i, float v) { std::memcpy(out + i * 4, &v, 4); };
  const auto store_bf16 = [](std::byte* out, size_t i, float v) {
    const uint16_t b = float_to_bfloat16(v);
    std::memcpy(out + i * 2, &b, 2);
  };
  const auto from_f32 = [](const std::byte* p) { return load32(p); };
  const auto from_f16 = [](const std::byte* p) { return half_to_float(load16(p)); };
  const auto from_bf16 = [](const std::byte* p) { return bfloat16_to_float(load16(p)); };
  if (to == StoredType::FLOAT32) {
    if (from == StoredType::FLOAT16) convert_loop<2>(src, dst, count, from_f16, store_f32);
    else convert_loop<2>(src, dst, count, from_bf16, store_f32);
  } else {
    if (from == StoredType::FLOAT16) convert_loop<2>(src, dst, count, from_f16, store_bf16);
    else convert_loop<4>(src, dst, count, from_f32, store_bf16);
  }
}

}  // namespace meshnn::io
