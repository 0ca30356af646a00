// Synthetic Falcon MLP weights: the bare block or a whole checkpoint's MLPs, in the layout a
// converted Hugging Face checkpoint has, values from io::synthetic_value.
#pragma once

#include <cstdint>
#include <string>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::models::falcon {

// Falcon MLP dataset names: the bare block ("dense_h_to_4h.weight") or layer i of a whole
// checkpoint ("transformer.h.{i}.mlp.dense_h_to_4h.weight"). layer < 0 = bare block.
std::string mlp_key(int layer, const std::string& name);

struct SyntheticFalconMlp {
  int64_t hidden_size = 4544;         // Falcon-7B
  int64_t intermediate_size = 18176;  // 4 * hidden
  int num_layers = 0;                 // 0: a bare MLP block; n: a checkpoint with n layers
  io::StoredType storage = io::StoredType::BFLOAT16;
  uint64_t seed = 1234;
  bool chunked = false;
  int deflate_level = 0;
};

// Tensor ids and scales used for the Falcon MLP: dense_h_to_4h = 2 * layer + 1, dense_4h_to_h =
// 2 * layer + 2 (bare block: layer 0); scale = sqrt(3 / fan_in), so activations keep unit variance.
uint64_t tensor_id(int layer, bool second_linear);
double weight_scale(int64_t fan_in);

// Writes the weights file (atomically, streaming 64 rows at a time).
void write_synthetic_mlp(const std::string& file, const SyntheticFalconMlp& spec);

}  // namespace meshnn::models::falcon
