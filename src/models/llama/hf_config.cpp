// Llama, Mistral, Qwen2, Qwen3 and Phi-3 (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, Phi3ForCausalLM) in a Hugging Face config.json: the root attributes meshnn's
// Llama reads (src/models/llama/config.cpp) and the state_dict names and shapes the configuration
// implies, by the names meshnn/models/llama/config.hpp gives the loader.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../hf_config.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/models/llama/config.hpp"

namespace meshnn::models::llama {

void read_hf_config(const HfConfigFile& c, HfModelConfig& m) {
  const int64_t hidden = c.positive("hidden_size"), intermediate = c.positive("intermediate_size");
  const int64_t layers = c.positive("num_hidden_layers"), heads = c.positive("num_attention_heads");
  const int64_t kv_heads = c.positive("num_key_value_heads", heads), vocab = c.positive("vocab_size");
  MESHNN_CHECK(c.has("head_dim") || hidden % heads == 0,
               "{}: hidden_size {} is not a multiple of num_attention_heads {} and there is no head_dim", c.file(),
               hidden, heads);
  const int64_t head_dim = c.positive("head_dim", hidden / heads);
  MESHNN_CHECK(heads % kv_heads == 0, "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", c.file(),
               heads, kv_heads);
  // meshnn's Llama has none of these; converting them would give a file that runs wrongly.
  const std::string act = c.string("hidden_act", "silu");
  MESHNN_CHECK(act == "silu", "{}: hidden_act '{}' is not supported (meshnn's Llama uses silu)", c.file(), act);
  for (const char* flag : {"attention_bias", "mlp_bias"})
    MESHNN_CHECK(!c.boolean(flag, false),
                 "{}: {} = true is not supported (meshnn's Llama has no biases but Qwen2's on q/k/v)", c.file(), flag);
  const bool tied = c.boolean("tie_word_embeddings", false);
  const bool mistral = c.string("model_type", "llama") == "mistral";
  // Qwen2 is Llama with biases on q_proj, k_proj and v_proj. Its sliding window (layers from
  // max_window_layers on) applies only with use_sliding_window, which meshnn does not run.
  const bool qwen2 = m.architecture == "Qwen2ForCausalLM";
  // Qwen3 is Llama with an RMSNorm over each query and key head (q_norm, k_norm: [head_dim]) before
  // RoPE, and the same optional sliding window as Qwen2.
  const bool qwen3 = m.architecture == "Qwen3ForCausalLM";
  if (qwen2 || qwen3)
    MESHNN_CHECK(!c.boolean("use_sliding_window", false),
                 "{}: use_sliding_window = true is not supported (meshnn runs {}'s attention over the whole context)",
                 c.file(), qwen2 ? "Qwen2" : "Qwen3");
  // Phi-3 is Mistral (a sliding window when the config names one) with q/k/v fused into qkv_proj
  // and gate/up into gate_up_proj, which the file holds apart, and longrope for its 128k models. Its
  // rotary embedding may cover part of each head (Phi-4-mini), which meshnn's does not.
  const bool phi3 = m.architecture == "Phi3ForCausalLM";
  if (phi3)
    MESHNN_CHECK(c.real("partial_rotary_factor", 1.0) == 1.0,
                 "{}: partial_rotary_factor {} is not supported (meshnn rotates every dimension of a head)", c.file(),
                 c.real("partial_rotary_factor", 1.0));

  io::Attributes& a = m.attributes;
  a["model_type"] = std::string(qwen2 ? "qwen2" : qwen3 ? "qwen3" : phi3 ? "phi3" : mistral ? "mistral" : "llama");
  set_size_attributes({hidden, intermediate, layers, heads, kv_heads, vocab}, a);
  a["head_dim"] = head_dim;
  // Hugging Face's defaults: LlamaConfig 2048, Qwen2Config and Qwen3Config 32768, Phi3Config 4096.
  a["max_position_embeddings"] = c.positive("max_position_embeddings", qwen2 || qwen3 ? 32768 : phi3 ? 4096 : 2048);
  a["rms_norm_eps"] = c.real("rms_norm_eps", 1e-6);
  a["rope_theta"] = c.real("rope_theta", 10000.0);
  a["tie_word_embeddings"] = int64_t{tied ? 1 : 0};
  // A JSON object in config.json; kept as its JSON text so nothing of it is lost.
  if (c.has("rope_scaling")) {
    MESHNN_CHECK(c.at("rope_scaling").is_object(), "{}: 'rope_scaling' must be an object, got {}", c.file(),
                 c.at("rope_scaling").dump());
    nlohmann::json scaling = c.at("rope_scaling");
    // Phi3Config reads the types "su" and "yarn" as "longrope" (its early configs named it so): the
    // file says what Hugging Face runs, so the job applies longrope to them, not YaRN.
    for (const char* key : {"rope_type", "type"})
      if (phi3 && scaling.contains(key) && (scaling[key] == "su" || scaling[key] == "yarn")) scaling[key] = "longrope";
    // Phi3Config keeps longrope's original context beside max_position_embeddings, not in the object.
    if (phi3 && !scaling.contains("original_max_position_embeddings") && c.has("original_max_position_embeddings"))
      scaling["original_max_position_embeddings"] = c.positive("original_max_position_embeddings");
    a["rope_scaling"] = scaling.dump();
    // The job's own reading says whether it will run this file (a type it does not apply, a value
    // out of range); the conversion goes on, as the file keeps the config whole.
    try {
      rope_scaling_from_json(std::get<std::string>(a["rope_scaling"]), std::get<int64_t>(a["max_position_embeddings"]),
                             c.file());
    } catch (const Error& e) {
      m.warnings.push_back(fmt::format("{}; the rope_scaling is kept in the file, but meshnn's Llama job will refuse it",
                                       e.what()));
    }
  }
  // Mistral and Phi-3 attend over a sliding window (Llama has none, whatever its config says).
  // Hugging Face's MistralConfig defaults it to 4096 when the key is absent, Phi3Config to none;
  // null means none.
  if ((mistral || phi3) && c.has("sliding_window"))
    a["sliding_window"] = c.positive("sliding_window");
  else if (mistral && !c.written("sliding_window"))
    a["sliding_window"] = int64_t{4096};

  auto& e = m.expected_tensors;
  e[embed_tokens_key()] = {vocab, hidden};
  for (int64_t i = 0; i < layers; ++i) {
    auto key = [i](const char* name) { return layer_key(i, name); };
    e[key("input_layernorm.weight")] = {hidden};
    e[key("post_attention_layernorm.weight")] = {hidden};
    if (phi3) {
      e[key("self_attn.qkv_proj.weight")] = {(heads + 2 * kv_heads) * head_dim, hidden};
      m.row_splits[key("self_attn.qkv_proj.weight")] = {{key("self_attn.q_proj.weight"), heads * head_dim},
                                                          {key("self_attn.k_proj.weight"), kv_heads * head_dim},
                                                          {key("self_attn.v_proj.weight"), kv_heads * head_dim}};
    } else {
      e[key("self_attn.q_proj.weight")] = {heads * head_dim, hidden};
      e[key("self_attn.k_proj.weight")] = {kv_heads * head_dim, hidden};
      e[key("self_attn.v_proj.weight")] = {kv_heads * head_dim, hidden};
    }
    if (qwen2) {
      e[key("self_attn.q_proj.bias")] = {heads * head_dim};
      e[key("self_attn.k_proj.bias")] = {kv_heads * head_dim};
      e[key("self_attn.v_proj.bias")] = {kv_heads * head_dim};
    }
    if (qwen3) {
      e[key("self_attn.q_norm.weight")] = {head_dim};
      e[key("self_attn.k_norm.weight")] = {head_dim};
    }
    e[key("self_attn.o_proj.weight")] = {hidden, heads * head_dim};
    if (phi3) {
      // Phi3MLP chunks gate_up_proj's output in two: the gate first, then up.
      e[key("mlp.gate_up_proj.weight")] = {2 * intermediate, hidden};
      m.row_splits[key("mlp.gate_up_proj.weight")] = {{key("mlp.gate_proj.weight"), intermediate},
                                                       {key("mlp.up_proj.weight"), intermediate}};
    } else {
      e[key("mlp.gate_proj.weight")] = {intermediate, hidden};
      e[key("mlp.up_proj.weight")] = {intermediate, hidden};
    }
    e[key("mlp.down_proj.weight")] = {hidden, intermediate};
  }
  e[final_norm_key()] = {hidden};
  if (!tied) e[lm_head_key()] = {vocab, hidden};
  m.shape_source = fmt::format("hidden_size {}, intermediate_size {}, num_hidden_layers {}, num_attention_heads {}, "
                               "num_key_value_heads {}, head_dim {}, vocab_size {}",
                               hidden, intermediate, layers, heads, kv_heads, head_dim, vocab);
}

}  // namespace meshnn::models::llama
