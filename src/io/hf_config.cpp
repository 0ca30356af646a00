#include "hf_config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "meshnn/core/error.hpp"

namespace meshnn::io::detail {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  MESHNN_CHECK(in.good(), "cannot read '{}'", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(fmt::format("'{}' is not valid JSON ({})", path.string(), e.what()));
  }
}

// Typed access to config.json with errors naming the key. `null` counts as absent, as in
// Hugging Face's config classes.
class Config {
 public:
  Config(json j, std::string file) : j_(std::move(j)), file_(std::move(file)) {
    MESHNN_CHECK(j_.is_object(), "'{}' is not a JSON object", file_);
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  // Written at all, null included: where null and absent mean different things.
  bool written(const char* key) const { return j_.contains(key); }
  const json& at(const char* key) const { return j_.at(key); }
  const std::string& file() const { return file_; }

  std::optional<int64_t> opt_int(const char* key) const {
    if (!has(key)) return std::nullopt;
    const json& v = j_.at(key);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9e15)
      return static_cast<int64_t>(v.get<double>());
    throw Error(fmt::format("{}: '{}' must be an integer, got {}", file_, key, v.dump()));
  }
  // A size: a positive integer.
  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const std::optional<int64_t> v = opt_int(key);
    MESHNN_CHECK(v || fallback, "{}: '{}' is missing", file_, key);
    const int64_t x = v ? *v : *fallback;
    MESHNN_CHECK(x > 0 && x <= (int64_t{1} << 40), "{}: '{}' must be a positive integer, got {}", file_, key, x);
    return x;
  }
  double real(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    MESHNN_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", file_, key, v.dump());
    const double x = v.get<double>();
    MESHNN_CHECK(std::isfinite(x) && x > 0, "{}: '{}' must be a positive number, got {}", file_, key, v.dump());
    return x;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    MESHNN_CHECK(j_.at(key).is_boolean(), "{}: '{}' must be true or false, got {}", file_, key, j_.at(key).dump());
    return j_.at(key).get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    MESHNN_CHECK(j_.at(key).is_string(), "{}: '{}' must be a string, got {}", file_, key, j_.at(key).dump());
    return j_.at(key).get<std::string>();
  }

 private:
  json j_;
  std::string file_;
};

// The ids of a special token: an integer or (Llama 3's eos) a list of them.
std::vector<int64_t> token_ids(const json& v, const std::string& file, const char* key) {
  std::vector<int64_t> ids;
  if (v.is_number_integer()) ids.push_back(v.get<int64_t>());
  else if (v.is_array())
    for (const json& x : v) {
      MESHNN_CHECK(x.is_number_integer(), "{}: '{}' must be an integer or a list of integers, got {}", file, key, v.dump());
      ids.push_back(x.get<int64_t>());
    }
  else
    throw Error(fmt::format("{}: '{}' must be an integer or a list of integers, got {}", file, key, v.dump()));
  return ids;
}

// bos_token_id / eos_token_id from config.json, else from generation_config.json.
void special_tokens(const Config& c, const fs::path& dir, int64_t vocab, HfModelConfig& m) {
  std::optional<Config> generation;
  if (fs::exists(dir / "generation_config.json"))
    generation.emplace(read_json(dir / "generation_config.json"), (dir / "generation_config.json").string());
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    const Config* source = c.has(key) ? &c : (generation && generation->has(key) ? &*generation : nullptr);
    if (source == nullptr) continue;
    const std::vector<int64_t> ids = token_ids(source->at(key), source->file(), key);
    if (ids.empty()) continue;
    for (int64_t id : ids)
      MESHNN_CHECK(id >= 0 && id < vocab, "{}: {} {} is outside the vocabulary [0, {}) of vocab_size", source->file(),
                   key, id, vocab);
    m.attributes[key] = ids.front();
    if (std::string(key) == "eos_token_id" && source->at(key).is_array()) m.eos_token_ids = ids;
  }
}

void read_llama(const Config& c, HfModelConfig& m) {
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
    MESHNN_CHECK(!c.boolean(flag, false), "{}: {} = true is not supported (meshnn's Llama has no biases)", c.file(), flag);
  const bool tied = c.boolean("tie_word_embeddings", false);
  const bool mistral = c.string("model_type", "llama") == "mistral";

  Attributes& a = m.attributes;
  a["model_type"] = std::string(mistral ? "mistral" : "llama");
  a["hidden_size"] = hidden;
  a["intermediate_size"] = intermediate;
  a["num_hidden_layers"] = layers;
  a["num_attention_heads"] = heads;
  a["num_key_value_heads"] = kv_heads;
  a["head_dim"] = head_dim;
  a["vocab_size"] = vocab;
  a["max_position_embeddings"] = c.positive("max_position_embeddings", 2048);
  a["rms_norm_eps"] = c.real("rms_norm_eps", 1e-6);
  a["rope_theta"] = c.real("rope_theta", 10000.0);
  a["tie_word_embeddings"] = int64_t{tied ? 1 : 0};
  // A JSON object in config.json; kept as its JSON text so nothing of it is lost.
  if (c.has("rope_scaling")) {
    MESHNN_CHECK(c.at("rope_scaling").is_object(), "{}: 'rope_scaling' must be an object, got {}", c.file(),
                 c.at("rope_scaling").dump());
    a["rope_scaling"] = c.at("rope_scaling").dump();
    const nlohmann::json& scaling = c.at("rope_scaling");
    const nlohmann::json type = scaling.contains("rope_type") ? scaling.at("rope_type") : scaling.value("type", json());
    const bool applied = type.is_null() || (type.is_string() && (type == "default" || type == "linear" ||
                                                                 type == "dynamic" || type == "llama3"));
    if (!applied)
      m.warnings.push_back(fmt::format("config.json has rope_scaling {}; it is kept in the file, but meshnn's Llama job "
                                       "applies only default, linear, dynamic and llama3 and will refuse this file",
                                       scaling.dump()));
  }
  // Mistral attends over a sliding window (Llama has none, whatever its config says). Hugging Face's
  // MistralConfig defaults it to 4096 when the key is absent; null means none.
  if (mistral && c.has("sliding_window"))
    a["sliding_window"] = c.positive("sliding_window");
  else if (mistral && !c.written("sliding_window"))
    a["sliding_window"] = int64_t{4096};

  auto& e = m.expected_tensors;
  e["model.embed_tokens.weight"] = {vocab, hidden};
  for (int64_t i = 0; i < layers; ++i) {
    auto key = [i](const char* name) { return fmt::format("model.layers.{}.{}", i, name); };
    e[key("input_layernorm.weight")] = {hidden};
    e[key("post_attention_layernorm.weight")] = {hidden};
    e[key("self_attn.q_proj.weight")] = {heads * head_dim, hidden};
    e[key("self_attn.k_proj.weight")] = {kv_heads * head_dim, hidden};
    e[key("self_attn.v_proj.weight")] = {kv_heads * head_dim, hidden};
    e[key("self_attn.o_proj.weight")] = {hidden, heads * head_dim};
    e[key("mlp.gate_proj.weight")] = {intermediate, hidden};
    e[key("mlp.up_proj.weight")] = {intermediate, hidden};
    e[key("mlp.down_proj.weight")] = {hidden, intermediate};
  }
  e["model.norm.weight"] = {hidden};
  if (!tied) e["lm_head.weight"] = {vocab, hidden};
  m.shape_source = fmt::format("hidden_size {}, intermediate_size {}, num_hidden_layers {}, num_attention_heads {}, "
                               "num_key_value_heads {}, head_dim {}, vocab_size {}",
                               hidden, intermediate, layers, heads, kv_heads, head_dim, vocab);
}

// Falcon, in both config dialects: FalconConfig (num_hidden_layers, num_attention_heads) and the
// original RefinedWeb one (n_layer, n_head).
void read_falcon(const Config& c, HfModelConfig& m) {
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

  Attributes& a = m.attributes;
  a["model_type"] = std::string("falcon");
  a["hidden_size"] = hidden;
  a["intermediate_size"] = intermediate;
  a["num_hidden_layers"] = layers;
  a["num_attention_heads"] = heads;
  a["num_key_value_heads"] = kv_heads;
  a["vocab_size"] = vocab;
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

}  // namespace

HfModelConfig read_hf_config(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path file = dir / "config.json";
  MESHNN_CHECK(fs::is_regular_file(file), "'{}' has no config.json (expected a Hugging Face model directory)", model_dir);
  const Config c(read_json(file), file.string());

  HfModelConfig m;
  if (c.has("architectures")) {
    const json& arch = c.at("architectures");
    MESHNN_CHECK(arch.is_array() && arch.size() == 1 && arch[0].is_string(),
                 "{}: 'architectures' must be a list of one name, got {}", c.file(), arch.dump());
    m.architecture = arch[0].get<std::string>();
  } else {
    // Old configs without 'architectures' name only the model_type.
    const std::string type = c.string("model_type", "");
    m.architecture = type == "llama"                                     ? "LlamaForCausalLM"
                     : type == "mistral"                                 ? "MistralForCausalLM"
                     : type == "falcon"                                  ? "FalconForCausalLM"
                     : type == "RefinedWeb" || type == "RefinedWebModel" ? "RWForCausalLM"
                                                                         : "model_type '" + type + "'";
  }
  if (m.architecture == "LlamaForCausalLM" || m.architecture == "MistralForCausalLM") {
    m.family = HfFamily::LLAMA;
    read_llama(c, m);
  } else if (m.architecture == "FalconForCausalLM" || m.architecture == "RWForCausalLM") {
    m.family = HfFamily::FALCON;
    read_falcon(c, m);
  } else {
    throw Error(fmt::format("{}: architecture {} is not supported; meshnn-convert accepts LlamaForCausalLM, "
                            "MistralForCausalLM, FalconForCausalLM and RWForCausalLM",
                            c.file(), m.architecture.rfind("model_type", 0) == 0 ? m.architecture : "'" + m.architecture + "'"));
  }
  special_tokens(c, dir, std::get<int64_t>(m.attributes.at("vocab_size")), m);
  return m;
}

}  // namespace meshnn::io::detail
