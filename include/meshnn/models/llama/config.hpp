// The configuration of a Llama-family decoder (Hugging Face LlamaForCausalLM: Llama 2/3,
// TinyLlama, Mistral-shaped models; Qwen2ForCausalLM, which adds biases to q/k/v; Qwen3ForCausalLM,
// which normalises each query and key head) and the state_dict names of its weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::models::llama {

// Hugging Face's rope_scaling (config.json's object, kept by meshnn-convert as its JSON text in the
// root attribute "rope_scaling"): how the rotary inverse frequencies are changed for long contexts.
//   LINEAR:  inv_freq / factor (positions interpolated).
//   LLAMA3:  Llama 3.1/3.2: frequencies whose wavelength exceeds original / low_freq_factor are
//            divided by factor, those under original / high_freq_factor kept, and those between
//            blended smoothly.
//   DYNAMIC: NTK scaling, which changes nothing until a sequence outgrows max_position_embeddings;
//            the job never lets one, so it runs as DEFAULT.
//   YARN:    YaRN (Qwen2.5/Qwen3 long context, models extended with it): over the pair index i,
//            frequencies that turn more than beta_fast times within the original context are
//            kept, those that turn fewer than beta_slow times are divided by factor, and a linear
//            ramp blends the ones between (bounds rounded outwards unless truncate is false).
//            cos and sin are multiplied by attention_factor (default 0.1 ln(factor) + 1, or the
//            ratio of the mscale and mscale_all_dim forms), so attention logits grow by its square.
//   LONGROPE: Phi-3's 128k models: frequency i divided by short_factor[i], or by long_factor[i] when
//            sequences run past original_max_position_embeddings (Hugging Face switches to the long
//            factors once a sequence does; meshnn chooses once per job, use_long_factors below);
//            cos and sin multiplied by attention_factor (default sqrt(1 + ln(s) / ln(original)), s
//            = max_position_embeddings / original).
struct RopeScaling {
  enum class Type { DEFAULT, LINEAR, DYNAMIC, LLAMA3, YARN, LONGROPE };
  Type type = Type::DEFAULT;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // LLAMA3
  int64_t original_max_position_embeddings = 0;          // LLAMA3, YARN, LONGROPE (the pre-extension context)
  double beta_fast = 32.0, beta_slow = 1.0;              // YARN
  bool truncate = true;                                  // YARN
  std::vector<double> short_factor, long_factor;         // LONGROPE: head_dim / 2 each
  bool use_long_factors = false;                         // LONGROPE: select_rope_factors sets it
  // What cos and sin are multiplied by; the file's own "attention_factor" (YARN) or the one its
  // type derives. 1 for every type but YARN.
  double attention_factor = 1.0;
  // The YARN context: original_max_position_embeddings * factor (0 for the other types).
  int64_t extended_context() const;
};

struct LlamaConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // grouped-query attention: divides num_attention_heads
  int64_t head_dim = 0;             // hidden_size / num_attention_heads unless the file says otherwise
  int64_t vocab_size = 0;
  // The longest sequence the model runs. config_from_attributes raises the file's value to a YARN
  // rope_scaling's extended_context() when that is longer, as vLLM derives its max_model_len:
  // Qwen's instructions add rope_scaling to config.json and leave max_position_embeddings as it was.
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  std::optional<int64_t> sliding_window;  // Mistral: each token attends to this many latest positions
  bool tie_word_embeddings = false;  // lm_head is model.embed_tokens.weight
  // Qwen2: q_proj, k_proj and v_proj carry biases (self_attn.{q,k,v}_proj.bias); o_proj and the
  // MLP have none. Files say so by model_type "qwen2".
  bool qkv_bias = false;
  // Qwen3: each head of q and of k is RMS-normalised on its own after the projection and before
  // RoPE (self_attn.q_norm.weight and self_attn.k_norm.weight, [head_dim], one for every head).
  // Files say so by model_type "qwen3".
  bool qk_norm = false;
  std::optional<int64_t> bos_token_id, eos_token_id;

  // Throws meshnn::Error naming the first value that is missing, non-positive or inconsistent
  // (heads not dividing, odd head_dim, ...). `source` names the file in the message.
  void validate(const std::string& source) const;
};

// Reads the root attributes (docs/spec/hdf5.md §3: Hugging Face config.json names). model_type must be "llama",
// "mistral", "qwen2" (qkv_bias) or "qwen3" (qk_norm); num_key_value_heads defaults to num_attention_heads, head_dim to hidden/heads,
// rms_norm_eps to 1e-6... as Hugging Face's LlamaConfig defaults them. Throws meshnn::Error.
LlamaConfig config_from_attributes(const io::Attributes& attrs, const std::string& file);

// The attributes a file must carry for config_from_attributes to give `config` back.
io::Attributes config_to_attributes(const LlamaConfig& config);

// rope_scaling from its JSON text (keys as in config.json: "rope_type" or the older "type",
// "factor", ...). Throws meshnn::Error naming `source` for invalid JSON, a missing or out-of-range
// value, or a type meshnn does not apply (longrope, ...; and dynamic with an
// original_max_position_embeddings below max_position_embeddings, which would scale inside the
// context). YARN's original_max_position_embeddings defaults to max_position_embeddings, as
// Hugging Face's does for configs without it.
RopeScaling rope_scaling_from_json(const std::string& json_text, int64_t max_position_embeddings,
                                   const std::string& source);
std::string rope_scaling_to_json(const RopeScaling& scaling);

// The head_dim / 2 rotary inverse frequencies: rope_theta^(-2i / head_dim), then rope_scaling.
std::vector<double> rope_inverse_frequencies(const LlamaConfig& config);

// LONGROPE: the long factors when a sequence of the job may be longer than
// original_max_position_embeddings (`positions`: the most any sequence may fill), else the short
// ones; so a job whose sequences all fit the original context runs as Hugging Face runs them, and
// one that may go past it runs every sequence on the long factors. Nothing for other types.
void select_rope_factors(LlamaConfig& config, int64_t positions);

// state_dict names.
std::string embed_tokens_key();                           // "model.embed_tokens.weight" [vocab, hidden]
std::string layer_key(int64_t layer, const char* name);   // "model.layers.{layer}.{name}"
std::string final_norm_key();                             // "model.norm.weight" [hidden]
std::string lm_head_key();                                // "lm_head.weight" [vocab, hidden]

// Named shapes from the presets of meshnn-make-weights: "tiny" (tests: 2 layers, hidden 112,
// 8 heads / 2 KV heads of 14, intermediate 200, vocab 250), "tinyllama" (TinyLlama-1.1B),
// "qwen2.5-0.5b" (Qwen2.5-0.5B: q/k/v biases), "qwen3-0.6b" (Qwen3-0.6B: per-head q/k norms,
// head_dim 128 beside a hidden of 1024), "phi3-mini" (Phi-3-mini-4k: no grouping of KV heads, a
// sliding window of 2047), "llama3-8b" (Llama-3-8B). Throws meshnn::Error for another name.
LlamaConfig llama_preset(const std::string& name);
std::vector<std::string> llama_preset_names();

}  // namespace meshnn::models::llama
