#include "meshnn/io/synthetic_model.hpp"

#include <fmt/format.h>


#include "meshnn/core/error.hpp"
#include "meshnn/core/hash.hpp"

namespace meshnn::io {
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
