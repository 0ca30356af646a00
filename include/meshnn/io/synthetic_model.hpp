// Seeded synthetic values for model files in exactly the layout real checkpoints convert to, so
// that jobs, tests and benchmarks need no downloads. Values are a pure function of (seed, tensor,
// element index), so a test can recompute any element without the file and results don't depend
// on write order. Which tensors a model has is the model's business (models/*/synthetic.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::io {

// Element `index` of tensor `tensor_id`: uniform in [-scale, scale), or with `exact` a multiple of
// 1/64 in [-2, 2) that bfloat16 and float32 hold exactly (for bit-exact loading tests).
float synthetic_value(uint64_t seed, uint64_t tensor_id, int64_t index, double scale, bool exact = false);

// Values of a stored tensor, row-major, as the generators write them (tests use this).
std::vector<float> synthetic_values(uint64_t seed, uint64_t tensor_id, int64_t count, double scale, bool exact = false);

// Writes an activations file with dataset `input` [batch, seq, hidden] (float32, unit scale).
void write_synthetic_input(const std::string& file, int64_t batch, int64_t seq, int64_t hidden, uint64_t seed);
inline constexpr uint64_t kInputTensorId = 1000000;

}  // namespace meshnn::io
