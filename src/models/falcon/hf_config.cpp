// Falcon (FalconForCausalLM, RWForCausalLM) in a Hugging Face config.json: the root attributes
// meshnn's file carries and the state_dict names and shapes the configuration implies.
#include <fmt/format.h>

#include <string>

#include "../hf_config.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::models::falcon {

// Falcon, in both config dialects: FalconConfig (num_hidden_layers, num_attention_heads) and the
// original RefinedWeb one (n_layer, n_head).
void read_hf_config(const HfConfigFile& c, HfModelConfig& m) {
  const int64_t hidden = c.positive("hidden_size"), vocab = c.positive("vocab_size");
  const int64_t layers = c.positive(c.has("num_hidden_layers") ? "num_hidden_layers" : "n_layer");
  const int64_t heads = c.positive(c.has("num_attention_heads") ? "num_attention_heads" : "n_head");
  const int64_t intermediate = c.positive("ffn_hidden_size", 4 * hidden);
  MESHNN_CHECK(hidden % heads == 0, "{}: hidden_size {} is not a multiple of num_attention_heads {}", c.file(), hidden,
               heads);
  const int64_t head_dim = hidden / heads;
  const bool new_arch = c.boolean("new_decoder_architecture", false);
  const bool multi_query = c.boolean("multi_query", true);
  const int64_t kv_heads = new_arch ? c.positive(c.has("num_kv_heads") ? "num_kv_heads" : "n_head_kv", heads)
                                    : (multi_query ? 1 : heads);
  const bool bias = c.boolean("bias", false);

  io::Attributes& a = m.attributes;
  a["model_type"] = std::string("falcon");
  set_size_attributes({hidden, intermediate, layers, heads, kv_heads, vocab}, a);
  a["layer_norm_epsilon"] = c.real("layer_norm_epsilon", 1e-5);
  a["tie_word_embeddings"] = int64_t{c.boolean("tie_word_embeddings", true) ? 1 : 0};
  a["new_decoder_architecture"] = int64_t{new_arch ? 1 : 0};
  a["parallel_attn"] = int64_t{c.boolean("parallel_attn", true) ? 1 : 0};
  a["bias"] = int64_t{bias ? 1 : 0};
  a["alibi"] = int64_t{c.boolean("alibi", false) ? 1 : 0};
  if (c.has("rope_theta")) a["rope_theta"] = c.real("rope_theta", 10000.0);

  auto& e = m.expected_tensors;
  e["transformer.word_embeddings.weight"] = {vocab, hidden};
  for (int64_t i = 0; i < layers; ++i) {
    auto key = [i](const char* name) { return fmt::format("transformer.h.{}.{}", i, name); };
    e[key("self_attention.query_key_value.weight")] = {(heads + 2 * kv_heads) * head_dim, hidden};
    e[key("self_attention.dense.weight")] = {hidden, hidden};
    e[key("mlp.dense_h_to_4h.weight")] = {intermediate, hidden};
    e[key("mlp.dense_4h_to_h.weight")] = {hidden, intermediate};
    if (bias) {
      e[key("mlp.dense_h_to_4h.bias")] = {intermediate};
      e[key("mlp.dense_4h_to_h.bias")] = {hidden};
    }
  }
  e["transformer.ln_f.weight"] = {hidden};
  m.shape_source = fmt::format("hidden_size {}, ffn_hidden_size {}, layers {}, heads {}, kv heads {}, vocab_size {}",
                               hidden, intermediate, layers, heads, kv_heads, vocab);
}

}  // namespace meshnn::models::falcon
