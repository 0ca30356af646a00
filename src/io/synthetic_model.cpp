#include "meshnn/io/synthetic_model.hpp"

#include <fmt/format.h>

#include <cmath>

#include "meshnn/core/error.hpp"
#include "meshnn/core/hash.hpp"

namespace meshnn::io {
namespace {

constexpr int64_t kRowsPerWrite = 64;

void write_dataset(Hdf5Writer& w, const std::string& name, int64_t rows, int64_t cols, const SyntheticFalconMlp& s,
                   uint64_t tensor_id, double scale) {
  w.create_dataset(name, {rows, cols}, s.storage, s.chunked, s.deflate_level);
  for (int64_t r = 0; r < rows; r += kRowsPerWrite) {
    const int64_t n = std::min(kRowsPerWrite, rows - r);
    std::vector<float> block(static_cast<size_t>(n * cols));
    for (int64_t i = 0; i < n * cols; ++i)
      block[static_cast<size_t>(i)] = synthetic_value(s.seed, tensor_id, r * cols + i, scale);
    w.write_rows(name, r, block);
  }
}

}  // namespace

std::string falcon_mlp_key(int layer, const std::string& name) {
  return layer < 0 ? name : fmt::format("transformer.h.{}.mlp.{}", layer, name);
}

float synthetic_value(uint64_t seed, uint64_t tensor_id, int64_t index, double scale, bool exact) {
  const uint64_t h = mix64(mix64(seed ^ (tensor_id * 0x100000001B3ull)) + static_cast<uint64_t>(index));
  if (exact) return static_cast<float>(static_cast<int64_t>(h % 256) - 128) / 64.0f;
  const double unit = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  return static_cast<float>((unit * 2.0 - 1.0) * scale);
}

std::vector<float> synthetic_values(uint64_t seed, uint64_t tensor_id, int64_t count, double scale, bool exact) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = synthetic_value(seed, tensor_id, i, scale, exact);
  return v;
}

uint64_t falcon_tensor_id(int layer, bool second_linear) {
  return 2 * static_cast<uint64_t>(std::max(layer, 0)) + (second_linear ? 2 : 1);
}

double falcon_weight_scale(int64_t fan_in) { return std::sqrt(3.0 / static_cast<double>(fan_in)); }

void write_synthetic_falcon_mlp(const std::string& file, const SyntheticFalconMlp& s) {
  MESHNN_CHECK(s.hidden_size >= 1 && s.intermediate_size >= 1, "hidden and intermediate sizes must be >= 1, got {} and {}",
               s.hidden_size, s.intermediate_size);
  Hdf5Writer w(file);
  const int layers = std::max(s.num_layers, 1);
  for (int layer = 0; layer < layers; ++layer) {
    const int key_layer = s.num_layers == 0 ? -1 : layer;
    // PyTorch Linear layout [out, in].
    write_dataset(w, falcon_mlp_key(key_layer, "dense_h_to_4h.weight"), s.intermediate_size, s.hidden_size, s,
                  falcon_tensor_id(layer, false), falcon_weight_scale(s.hidden_size));
    write_dataset(w, falcon_mlp_key(key_layer, "dense_4h_to_h.weight"), s.hidden_size, s.intermediate_size, s,
                  falcon_tensor_id(layer, true), falcon_weight_scale(s.intermediate_size));
  }
  w.set_attribute("model_type", std::string("falcon"));
  w.set_attribute("hidden_size", s.hidden_size);
  w.set_attribute("intermediate_size", s.intermediate_size);
  w.set_attribute("num_hidden_layers", static_cast<int64_t>(layers));
  w.set_attribute("meshnn_synthetic_seed", static_cast<int64_t>(s.seed));
  w.commit();
}

void write_synthetic_input(const std::string& file, int64_t batch, int64_t seq, int64_t hidden, uint64_t seed) {
  MESHNN_CHECK(batch >= 1 && seq >= 1 && hidden >= 1, "input shape [{}, {}, {}] needs positive dims", batch, seq, hidden);
  Hdf5Writer w(file);
  w.create_dataset("input", {batch, seq, hidden}, StoredType::FLOAT32);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> rows(static_cast<size_t>(seq * hidden));
    for (int64_t i = 0; i < seq * hidden; ++i)
      rows[static_cast<size_t>(i)] = synthetic_value(seed, kInputTensorId, b * seq * hidden + i, 1.0);
    w.write_rows("input", b, rows);
  }
  w.commit();
}

}  // namespace meshnn::io
