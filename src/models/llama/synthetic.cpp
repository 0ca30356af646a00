#include "meshnn/models/llama/synthetic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshnn/core/error.hpp"
#include "meshnn/core/hash.hpp"
#include "meshnn/io/synthetic_model.hpp"

namespace meshnn::models::llama {
namespace {

constexpr int64_t kRowsPerWrite = 64;
constexpr uint64_t kEmbedId = 1, kLmHeadId = 2, kFinalNormId = 3;
constexpr uint64_t kFirstLayerId = 100, kIdsPerLayer = 16;
constexpr double kNormSpread = 0.2;
// q/k/v biases (Qwen2): as large as the unit-variance outputs they are added to, so that a model
// that dropped them would be far from one that adds them.
constexpr double kBiasSpread = 1.0;
// Qwen3's q/k norms: weights in [0.5, 3.5], far from the plain RMSNorm's 1, so that a model that
// skipped them (or applied them over the whole projection) would be far from one that applies them.
constexpr double kHeadNormSpread = 1.5, kHeadNormOffset = 2.0;

double linear_scale(int64_t fan_in) { return std::sqrt(3.0 / static_cast<double>(fan_in)); }

SyntheticTensor norm_tensor(std::string key, int64_t hidden, uint64_t id) {
  return {std::move(key), {hidden}, id, kNormSpread, 1.0};
}

SyntheticTensor linear_tensor(std::string key, int64_t out, int64_t in, uint64_t id) {
  return {std::move(key), {out, in}, id, linear_scale(in), 0.0};
}

void write_tensor(io::Hdf5Writer& w, const SyntheticTensor& t, const SyntheticLlama& s) {
  w.create_dataset(t.key, t.shape, s.storage, s.chunked, s.deflate_level);
  const int64_t rows = t.shape[0];
  const int64_t cols = t.shape.size() > 1 ? t.shape[1] : 1;
  std::vector<float> block;
  for (int64_t r = 0; r < rows; r += kRowsPerWrite) {
    const int64_t n = std::min(kRowsPerWrite, rows - r);
    block.resize(static_cast<size_t>(n * cols));
    for (int64_t i = 0; i < n * cols; ++i) block[static_cast<size_t>(i)] = synthetic_llama_value(t, s.seed, r * cols + i);
    w.write_rows(t.key, r, block);
  }
}

// Uniform in [0, n) from a 64-bit hash; the modulo bias is below 2^-32 for n < 2^32.
int64_t seeded_below(uint64_t seed, uint64_t tensor_id, int64_t index, int64_t n) {
  const uint64_t h = mix64(mix64(seed ^ (tensor_id * 0x100000001B3ull)) + static_cast<uint64_t>(index));
  return static_cast<int64_t>(h % static_cast<uint64_t>(n));
}

}  // namespace

std::vector<SyntheticTensor> synthetic_llama_tensors(const LlamaConfig& c) {
  c.validate("synthetic Llama config");
  const int64_t hidden = c.hidden_size, q_width = c.num_attention_heads * c.head_dim;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim, inter = c.intermediate_size;
  std::vector<SyntheticTensor> out;
  out.push_back({embed_tokens_key(), {c.vocab_size, hidden}, kEmbedId, 1.0, 0.0});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const uint64_t base = kFirstLayerId + kIdsPerLayer * static_cast<uint64_t>(i);
    out.push_back(norm_tensor(layer_key(i, "input_layernorm.weight"), hidden, base + 0));
    out.push_back(linear_tensor(layer_key(i, "self_attn.q_proj.weight"), q_width, hidden, base + 1));
    out.push_back(linear_tensor(layer_key(i, "self_attn.k_proj.weight"), kv_width, hidden, base + 2));
    out.push_back(linear_tensor(layer_key(i, "self_attn.v_proj.weight"), kv_width, hidden, base + 3));
    if (c.qkv_bias) {
      out.push_back({layer_key(i, "self_attn.q_proj.bias"), {q_width}, base + 9, kBiasSpread, 0.0});
      out.push_back({layer_key(i, "self_attn.k_proj.bias"), {kv_width}, base + 10, kBiasSpread, 0.0});
      out.push_back({layer_key(i, "self_attn.v_proj.bias"), {kv_width}, base + 11, kBiasSpread, 0.0});
    }
    if (c.qk_norm) {
      out.push_back({layer_key(i, "self_attn.q_norm.weight"), {c.head_dim}, base + 12, kHeadNormSpread, kHeadNormOffset});
      out.push_back({layer_key(i, "self_attn.k_norm.weight"), {c.head_dim}, base + 13, kHeadNormSpread, kHeadNormOffset});
    }
    out.push_back(linear_tensor(layer_key(i, "self_attn.o_proj.weight"), hidden, q_width, base + 4));
    out.push_back(norm_tensor(layer_key(i, "post_attention_layernorm.weight"), hidden, base + 5));
    out.push_back(linear_tensor(layer_key(i, "mlp.gate_proj.weight"), inter, hidden, base + 6));
    out.push_back(linear_tensor(layer_key(i, "mlp.up_proj.weight"), inter, hidden, base + 7));
    out.push_back(linear_tensor(layer_key(i, "mlp.down_proj.weight"), hidden, inter, base + 8));
  }
  out.push_back(norm_tensor(final_norm_key(), hidden, kFinalNormId));
  if (!c.tie_word_embeddings) out.push_back(linear_tensor(lm_head_key(), c.vocab_size, hidden, kLmHeadId));
  return out;
}

float synthetic_llama_value(const SyntheticTensor& t, uint64_t seed, int64_t index) {
  return static_cast<float>(t.offset + io::synthetic_value(seed, t.tensor_id, index, t.scale));
}

void write_synthetic_llama(const std::string& file, const SyntheticLlama& s) {
  MESHNN_CHECK(s.storage == io::StoredType::FLOAT32 || s.storage == io::StoredType::BFLOAT16,
               "synthetic Llama weights are stored as float32 or bfloat16, not {}", io::to_string(s.storage));
  const std::vector<SyntheticTensor> tensors = synthetic_llama_tensors(s.config);
  io::Hdf5Writer w(file);
  for (const SyntheticTensor& t : tensors) write_tensor(w, t, s);
  for (const auto& [name, value] : config_to_attributes(s.config)) w.set_attribute(name, value);
  w.set_attribute("meshnn_synthetic_seed", static_cast<int64_t>(s.seed));
  w.commit();
}

void write_synthetic_tokens(const std::string& file, int64_t batch, int64_t prompt_len, int64_t vocab, bool ragged,
                            uint64_t seed, int64_t max_new_tokens) {
  MESHNN_CHECK(batch >= 1 && prompt_len >= 1 && vocab >= 1, "tokens [{}, {}] of a vocabulary of {} need positive sizes",
               batch, prompt_len, vocab);
  MESHNN_CHECK(vocab <= (int64_t{1} << 31), "vocab {} does not fit int32 token ids", vocab);
  std::vector<int32_t> lengths(static_cast<size_t>(batch), static_cast<int32_t>(prompt_len));
  if (ragged)
    for (int64_t b = 0; b + 1 < batch; ++b)
      lengths[static_cast<size_t>(b)] = static_cast<int32_t>(1 + seeded_below(seed, kPromptLengthsTensorId, b, prompt_len));

  io::Hdf5Writer w(file);
  w.create_dataset("tokens", {batch, prompt_len}, io::StoredType::INT32);
  std::vector<int32_t> row(static_cast<size_t>(prompt_len));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < prompt_len; ++t)
      row[static_cast<size_t>(t)] =
          t < lengths[static_cast<size_t>(b)] ? static_cast<int32_t>(seeded_below(seed, kTokensTensorId, b * prompt_len + t, vocab)) : 0;
    w.write_rows("tokens", b, row);
  }
  if (ragged) {
    w.create_dataset("prompt_lengths", {batch}, io::StoredType::INT32);
    w.write_rows("prompt_lengths", 0, lengths);
  }
  if (max_new_tokens > 0) {
    // Seeded in [1, max_new_tokens], the last request exactly max_new_tokens: requests end at
    // different steps.
    std::vector<int32_t> new_tokens(static_cast<size_t>(batch), static_cast<int32_t>(max_new_tokens));
    for (int64_t b = 0; b + 1 < batch; ++b)
      new_tokens[static_cast<size_t>(b)] = static_cast<int32_t>(1 + seeded_below(seed, kMaxNewTokensTensorId, b, max_new_tokens));
    w.create_dataset("max_new_tokens", {batch}, io::StoredType::INT32);
    w.write_rows("max_new_tokens", 0, new_tokens);
  }
  w.commit();
}

}  // namespace meshnn::models::llama
