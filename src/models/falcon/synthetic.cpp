#include "meshnn/models/falcon/synthetic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshnn/core/error.hpp"
#include "meshnn/io/synthetic_model.hpp"

namespace meshnn::models::falcon {
namespace {

constexpr int64_t kRowsPerWrite = 64;

void write_dataset(io::Hdf5Writer& w, const std::string& name, int64_t rows, int64_t cols, const SyntheticFalconMlp& s,
                   uint64_t tensor_id, double scale) {
  w.create_dataset(name, {rows, cols}, s.storage, s.chunked, s.deflate_level);
  for (int64_t r = 0; r < rows; r += kRowsPerWrite) {
    const int64_t n = std::min(kRowsPerWrite, rows - r);
    std::vector<float> block(static_cast<size_t>(n * cols));
    for (int64_t i = 0; i < n * cols; ++i)
      block[static_cast<size_t>(i)] = io::synthetic_value(s.seed, tensor_id, r * cols + i, scale);
    w.write_rows(name, r, block);
  }
}

}  // namespace

std::string mlp_key(int layer, const std::string& name) {
  return layer < 0 ? name : fmt::format("transformer.h.{}.mlp.{}", layer, name);
}

uint64_t tensor_id(int layer, bool second_linear) {
  return 2 * static_cast<uint64_t>(std::max(layer, 0)) + (second_linear ? 2 : 1);
}

double weight_scale(int64_t fan_in) { return std::sqrt(3.0 / static_cast<double>(fan_in)); }

void write_synthetic_mlp(const std::string& file, const SyntheticFalconMlp& s) {
  MESHNN_CHECK(s.hidden_size >= 1 && s.intermediate_size >= 1, "hidden and intermediate sizes must be >= 1, got {} and {}",
               s.hidden_size, s.intermediate_size);
  io::Hdf5Writer w(file);
  const int layers = std::max(s.num_layers, 1);
  for (int layer = 0; layer < layers; ++layer) {
    const int key_layer = s.num_layers == 0 ? -1 : layer;
    // PyTorch Linear layout [out, in].
    write_dataset(w, mlp_key(key_layer, "dense_h_to_4h.weight"), s.intermediate_size, s.hidden_size, s,
                  tensor_id(layer, false), weight_scale(s.hidden_size));
    write_dataset(w, mlp_key(key_layer, "dense_4h_to_h.weight"), s.hidden_size, s.intermediate_size, s,
                  tensor_id(layer, true), weight_scale(s.intermediate_size));
  }
  w.set_attribute("model_type", std::string("falcon"));
  w.set_attribute("hidden_size", s.hidden_size);
  w.set_attribute("intermediate_size", s.intermediate_size);
  w.set_attribute("num_hidden_layers", static_cast<int64_t>(layers));
  w.set_attribute("meshnn_synthetic_seed", static_cast<int64_t>(s.seed));
  w.commit();
}

}  // namespace meshnn::models::falcon
