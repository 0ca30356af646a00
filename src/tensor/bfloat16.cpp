#include "meshnn/tensor/bfloat16.hpp"

#include "meshnn/core/error.hpp"
#include "meshnn/core/vector_clones.hpp"

namespace meshnn {

MESHNN_VECTOR_CLONES void float_to_bfloat16(std::span<const float> src, std::span<uint16_t> dst) {
  MESHNN_CHECK(src.size() == dst.size(), "float_to_bfloat16: source has {} elements, destination {}", src.size(),
               dst.size());
  const float* in = src.data();
  uint16_t* out = dst.data();
  const size_t n = src.size();
  // The scalar form's rounding with its NaN test as a select, not a branch, so that the loop
  // vectorises (the tensors' typecasts and the reductions' outputs run through here).
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    out[i] = static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : rounded);
  }
}

MESHNN_VECTOR_CLONES void bfloat16_to_float(std::span<const uint16_t> src, std::span<float> dst) {
  MESHNN_CHECK(src.size() == dst.size(), "bfloat16_to_float: source has {} elements, destination {}", src.size(),
               dst.size());
  const uint16_t* in = src.data();
  float* out = dst.data();
  const size_t n = src.size();
  for (size_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
}

}  // namespace meshnn
