#include "meshnn/tensor/bfloat16.hpp"

#include "meshnn/core/error.hpp"

namespace meshnn {

void float_to_bfloat16(std::span<const float> src, std::span<uint16_t> dst) {
  MESHNN_CHECK(src.size() == dst.size(), "float_to_bfloat16: source has {} elements, destination {}", src.size(),
               dst.size());
  const float* in = src.data();
  uint16_t* out = dst.data();
  const size_t n = src.size();
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bfloat16(in[i]);
}

void bfloat16_to_float(std::span<const uint16_t> src, std::span<float> dst) {
  MESHNN_CHECK(src.size() == dst.size(), "bfloat16_to_float: source has {} elements, destination {}", src.size(),
               dst.size());
  const uint16_t* in = src.data();
  float* out = dst.data();
  const size_t n = src.size();
  for (size_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(in[i]);
}

}  // namespace meshnn
