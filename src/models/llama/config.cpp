#include "meshnn/models/llama/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "meshnn/core/error.hpp"

namespace meshnn::models::llama {
namespace {

std::optional<int64_t> int_attribute(const io::Attributes& attrs, const std::string& name, const std::string& file) {
  const auto it = attrs.find(name);
  if (it == attrs.end()) return std::nullopt;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return *v;
  // h5py writes Python floats that hold whole numbers as doubles when they come from JSON.
  if (const auto* d = std::get_if<double>(&it->second); d != nullptr && *d == static_cast<double>(static_cast<int64_t>(*d)))
    return static_cast<int64_t>(*d);
  throw Error(fmt::format("root attribute '{}' of {} must be an integer", name, file));
}

std::optional<double> real_attribute(const io::Attributes& attrs, const std::string& name, const std::string& file) {
  const auto it = attrs.find(name);
  if (it == attrs.end()) return std::nullopt;
  if (const auto* v = std::get_if<double>(&it->second)) return *v;
  if (const auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  throw Error(fmt::format("root attribute '{}' of {} must be a number", name, file));
}

int64_t required(const io::Attributes& attrs, const std::string& name, const std::string& file) {
  const auto v = int_attribute(attrs, name, file);
  MESHNN_CHECK(v.has_value(), "'{}' missing from the root attributes of {} (a Llama config needs it)", name, file);
  return *v;
}

}  // namespace

void LlamaConfig::validate(const std::string& source) const {
  auto positive = [&](const char* name, int64_t v) {
    MESHNN_CHECK(v > 0, "{}: {} must be > 0, got {}", source, name, v);
  };
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("vocab_size", vocab_size);
  positive("max_position_embeddings", max_position_embeddings);
  MESHNN_CHECK(num_attention_heads % num_key_value_heads == 0,
               "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source, num_attention_heads,
               num_key_value_heads);
  MESHNN_CHECK(head_dim % 2 == 0, "{}: head_dim {} must be even for rotary embeddings", source, head_dim);
  for (const auto* factors : {&rope_scaling.short_factor, &rope_scaling.long_factor})
    MESHNN_CHECK(rope_scaling.type != RopeScaling::Type::LONGROPE || static_cast<int64_t>(factors->size()) == head_dim / 2,
                 "{}: rope_scaling longrope has {} factors per list, but head_dim {} has {} rotary pairs", source,
                 factors->size(), head_dim, head_dim / 2);
  MESHNN_CHECK(rms_norm_eps > 0, "{}: rms_norm_eps must be > 0, got {}", source, rms_norm_eps);
  MESHNN_CHECK(rope_theta > 0, "{}: rope_theta must be > 0, got {}", source, rope_theta);
  MESHNN_CHECK(!sliding_window || *sliding_window > 0, "{}: sliding_window must be > 0, got {}", source,
               sliding_window.value_or(0));
  MESHNN_CHECK(vocab_size <= (int64_t{1} << 24), "{}: vocab_size {} is above 2^24, which token ids here cannot hold",
               source, vocab_size);
  for (const auto& [name, id] : {std::pair{"bos_token_id", bos_token_id}, std::pair{"eos_token_id", eos_token_id}})
    MESHNN_CHECK(!id || (*id >= 0 && *id < vocab_size), "{}: {} {} is outside the vocabulary [0, {})", source, name,
                 id.value_or(0), vocab_size);
}

LlamaConfig config_from_attributes(const io::Attributes& attrs, const std::string& file) {
  const auto type = attrs.find("model_type");
  MESHNN_CHECK(type != attrs.end() && std::holds_alternative<std::string>(type->second),
               "'model_type' missing from the root attributes of {} (expected \"llama\")", file);
  const std::string& model_type = std::get<std::string>(type->second);
  // Mistral and Phi-3 are Llama with the file's sliding_window (Phi-3's fused projections are
  // apart in the file: meshnn-convert splits them).
  MESHNN_CHECK(model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3" ||
                   model_type == "phi3",
               "{} holds a '{}' model; the Llama job runs model_type \"llama\" (or \"mistral\", \"qwen2\", \"qwen3\", "
               "\"phi3\")",
               file, model_type);
  LlamaConfig c;
  c.qkv_bias = model_type == "qwen2";
  c.qk_norm = model_type == "qwen3";
  c.hidden_size = required(attrs, "hidden_size", file);
  c.intermediate_size = required(attrs, "intermediate_size", file);
  c.num_hidden_layers = required(attrs, "num_hidden_layers", file);
  c.num_attention_heads = required(attrs, "num_attention_heads", file);
  c.vocab_size = required(attrs, "vocab_size", file);
  // Hugging Face LlamaConfig's defaults for the optional ones.
  c.num_key_value_heads = int_attribute(attrs, "num_key_value_heads", file).value_or(c.num_attention_heads);
  c.max_position_embeddings = int_attribute(attrs, "max_position_embeddings", file).value_or(2048);
  c.rms_norm_eps = real_attribute(attrs, "rms_norm_eps", file).value_or(1e-6);
  c.rope_theta = real_attribute(attrs, "rope_theta", file).value_or(10000.0);
  c.tie_word_embeddings = int_attribute(attrs, "tie_word_embeddings", file).value_or(0) != 0;
  c.sliding_window = int_attribute(attrs, "sliding_window", file);
  if (const auto it = attrs.find("rope_scaling"); it != attrs.end()) {
    const auto* text = std::get_if<std::string>(&it->second);
    MESHNN_CHECK(text != nullptr, "root attribute 'rope_scaling' of {} must be a string holding JSON", file);
    c.rope_scaling = rope_scaling_from_json(*text, c.max_position_embeddings, file);
    c.max_position_embeddings = std::max(c.max_position_embeddings, c.rope_scaling.extended_context());
  }
  c.bos_token_id = int_attribute(attrs, "bos_token_id", file);
  c.eos_token_id = int_attribute(attrs, "eos_token_id", file);
  MESHNN_CHECK(c.num_attention_heads > 0, "{}: num_attention_heads must be > 0, got {}", file, c.num_attention_heads);
  c.head_dim = int_attribute(attrs, "head_dim", file).value_or(c.hidden_size / c.num_attention_heads);
  MESHNN_CHECK(attrs.count("head_dim") || c.hidden_size % c.num_attention_heads == 0,
               "{}: hidden_size {} is not a multiple of num_attention_heads {} and there is no head_dim", file,
               c.hidden_size, c.num_attention_heads);
  c.validate(file);
  return c;
}

io::Attributes config_to_attributes(const LlamaConfig& c) {
  MESHNN_CHECK(!(c.qkv_bias && c.qk_norm),
               "a Llama config with both q/k/v biases (qwen2) and per-head q/k norms (qwen3) has no model_type");
  io::Attributes a{{"model_type", std::string(c.qkv_bias ? "qwen2" : c.qk_norm ? "qwen3" : "llama")},
                   {"hidden_size", c.hidden_size},
                   {"intermediate_size", c.intermediate_size},
                   {"num_hidden_layers", c.num_hidden_layers},
                   {"num_attention_heads", c.num_attention_heads},
                   {"num_key_value_heads", c.num_key_value_heads},
                   {"head_dim", c.head_dim},
                   {"vocab_size", c.vocab_size},
                   {"max_position_embeddings", c.max_position_embeddings},
                   {"rms_norm_eps", c.rms_norm_eps},
                   {"rope_theta", c.rope_theta},
                   {"tie_word_embeddings", int64_t{c.tie_word_embeddings ? 1 : 0}}};
  if (c.rope_scaling.type != RopeScaling::Type::DEFAULT) a["rope_scaling"] = rope_scaling_to_json(c.rope_scaling);
  if (c.sliding_window) a["sliding_window"] = *c.sliding_window;
  if (c.bos_token_id) a["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) a["eos_token_id"] = *c.eos_token_id;
  return a;
}

std::string embed_tokens_key() { return "model.embed_tokens.weight"; }
std::string layer_key(int64_t layer, const char* name) { return fmt::format("model.layers.{}.{}", layer, name); }
std::string final_norm_key() { return "model.norm.weight"; }
std::string lm_head_key() { return "lm_head.weight"; }

LlamaConfig llama_preset(const std::string& name) {
  LlamaConfig c;
  if (name == "tiny") {
    // Sizes that are not multiples of 32 (nor of 32 x devices), grouped-query attention with
    // more devices than KV heads on 4 and 8 ranks: the shapes the tests need to cover.
    c.hidden_size = 112;
    c.intermediate_size = 200;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.vocab_size = 250;
    c.max_position_embeddings = 256;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
  } else if (name == "tinyllama") {
    c.hidden_size = 2048;
    c.intermediate_size = 5632;
    c.num_hidden_layers = 22;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 4;
    c.vocab_size = 32000;
    c.max_position_embeddings = 2048;
    c.bos_token_id = 1;
    c.eos_token_id = 2;
  } else if (name == "qwen2.5-0.5b") {
    // Qwen2.5-0.5B's config.json: q/k/v biases, tied embeddings, 14 heads / 2 KV heads of 64.
    c.hidden_size = 896;
    c.intermediate_size = 4864;
    c.num_hidden_layers = 24;
    c.num_attention_heads = 14;
    c.num_key_value_heads = 2;
    c.vocab_size = 151936;
    c.max_position_embeddings = 32768;
    c.rope_theta = 1000000.0;
    c.tie_word_embeddings = true;
    c.qkv_bias = true;
    c.bos_token_id = 151643;
    c.eos_token_id = 151643;
  } else if (name == "qwen3-0.6b") {
    // Qwen3-0.6B's config.json: per-head q/k norms, tied embeddings, 16 heads / 8 KV heads of 128
    // (2048 query columns beside a hidden of 1024).
    c.hidden_size = 1024;
    c.intermediate_size = 3072;
    c.num_hidden_layers = 28;
    c.num_attention_heads = 16;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.vocab_size = 151936;
    c.max_position_embeddings = 40960;
    c.rope_theta = 1000000.0;
    c.tie_word_embeddings = true;
    c.qk_norm = true;
    c.bos_token_id = 151643;
    c.eos_token_id = 151645;
  } else if (name == "phi3-mini") {
    // Phi-3-mini-4k-instruct's shapes: 32 heads and as many KV heads of 96, a sliding window of
    // 2047 positions. Generated files say model_type "llama" with that window; a converted Phi-3
    // says "phi3", which the job runs alike.
    c.hidden_size = 3072;
    c.intermediate_size = 8192;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 32;
    c.vocab_size = 32064;
    c.max_position_embeddings = 4096;
    c.sliding_window = 2047;
    c.bos_token_id = 1;
    c.eos_token_id = 32000;
  } else if (name == "llama3-8b") {
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.vocab_size = 128256;
    c.max_position_embeddings = 8192;
    c.rope_theta = 500000.0;
    c.bos_token_id = 128000;
    c.eos_token_id = 128001;
  } else {
    throw Error(fmt::format("unknown Llama preset '{}' (expected {})", name, fmt::join(llama_preset_names(), ", ")));
  }
  if (c.head_dim == 0) c.head_dim = c.hidden_size / c.num_attention_heads;
  c.rms_norm_eps = c.qkv_bias || c.qk_norm ? 1e-6 : 1e-5;  // as each model's config.json has it
  return c;
}

std::vector<std::string> llama_preset_names() {
  return {"tiny", "tinyllama", "qwen2.5-0.5b", "qwen3-0.6b", "phi3-mini", "llama3-8b"};
}

}  // namespace meshnn::models::llama
