// Synthetic model files in exactly the layout real checkpoints convert to, so that jobs, tests and
// benchmarks need no downloads. Values are a pure function of (seed, tensor, element index), so a
// test can recompute any element without the file and results don't depend on write order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::io {

// Falcon MLP dataset names: the bare block ("dense_h_to_4h.weight") or layer i of a whole
// checkpoint ("transformer.h.{i}.mlp.dense_h_to_4h.weight"). layer < 0 = bare block.
std::string falcon_mlp_key(int layer, const std::string& name);

struct SyntheticFalconMlp {
  int64_t hidden_size = 4544;         // Falcon-7B
  int64_t intermediate_size = 18176;  // 4 * hidden
  int num_layers = 0;                 // 0: a bare MLP block; n: a checkpoint with n layers
  StoredType storage = StoredType::BFLOAT16;
  uint64_t seed = 1234;
  bool chunked = false;
  int deflate_level = 0;
};

// Element `index` of tensor `tensor_id`: uniform in [-scale, scale), or with `exact` a multiple of
// 1/64 in [-2, 2) that bfloat16 and float32 hold exactly (for bit-exact loading tests).
float synthetic_value(uint64_t seed, uint64_t tensor_id, int64_t index, double scale, bool exact = false);

// Values of a stored tensor, row-major, as the generator writes them (tests use this).
std::vector<float> synthetic_values(uint64_t seed, uint64_t tensor_id, int64_t count, double scale, bool exact = false);

// Tensor ids and scales used for the Falcon MLP: dense_h_to_4h = 2 * layer + 1, dense_4h_to_h =
// 2 * layer + 2 (bare block: layer 0); scale = sqrt(3 / fan_in), so activations keep unit variance.
uint64_t falcon_tensor_id(int layer, bool second_linear);
double falcon_weight_scale(int64_t fan_in);

// Writes the weights file (atomically, streaming 64 rows at a time).
void write_synthetic_falcon_mlp(const std::string& file, const SyntheticFalconMlp& spec);

// Writes an activations file with dataset `input` [batch, seq, hidden] (float32, unit scale).
void write_synthetic_input(const std::string& file, int64_t batch, int64_t seq, int64_t hidden, uint64_t seed);
inline constexpr uint64_t kInputTensorId = 1000000;

}  // namespace meshnn::io
