#include "hf_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "meshnn/core/error.hpp"
#include "meshnn/models/hf_convert.hpp"

namespace meshnn::models {
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

// bos_token_id from config.json, else from generation_config.json. eos_token_id likewise, and
// every eos id of both files: Hugging Face's generate() stops at generation_config.json's, which
// may name more than config.json does (Qwen2.5-Instruct: <|im_end|> there, <|endoftext|> too here).
void special_tokens(const HfConfigFile& c, const fs::path& dir, int64_t vocab, HfModelConfig& m) {
  std::optional<HfConfigFile> generation;
  if (fs::exists(dir / "generation_config.json"))
    generation.emplace(read_json(dir / "generation_config.json"), (dir / "generation_config.json").string());
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    std::vector<int64_t> ids;
    bool listed = false;  // a list in either file, or ids from both
    const HfConfigFile* sources[] = {&c, generation ? &*generation : nullptr};
    for (const HfConfigFile* source : sources) {
      if (source == nullptr || !source->has(key)) continue;
      for (int64_t id : token_ids(source->at(key), source->file(), key)) {
        MESHNN_CHECK(id >= 0 && id < vocab, "{}: {} {} is outside the vocabulary [0, {}) of vocab_size",
                     source->file(), key, id, vocab);
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      listed |= source->at(key).is_array();
      if (std::string(key) == "bos_token_id") break;  // the first file that names it
    }
    if (ids.empty()) continue;
    m.attributes[key] = ids.front();
    if (std::string(key) == "eos_token_id" && (listed || ids.size() > 1)) m.eos_token_ids = ids;
  }
}

// The architectures meshnn-convert accepts, in the order its error names them: each with its
// family's reader and the model_type values that stand for it in old configs without
// 'architectures'. A new family adds its rows here and its reader in its own folder.
struct HfArchitecture {
  std::string name;
  std::vector<std::string> model_types;
  void (*read)(const HfConfigFile& c, HfModelConfig& m);
};

const std::vector<HfArchitecture>& hf_architectures() {
  static const std::vector<HfArchitecture> table = {
      {"LlamaForCausalLM", {"llama"}, llama::read_hf_config},
      {"MistralForCausalLM", {"mistral"}, llama::read_hf_config},
      {"Qwen2ForCausalLM", {"qwen2"}, llama::read_hf_config},
      {"Qwen3ForCausalLM", {"qwen3"}, llama::read_hf_config},
      {"Phi3ForCausalLM", {"phi3"}, llama::read_hf_config},
      {"FalconForCausalLM", {"falcon"}, falcon::read_hf_config},
      {"RWForCausalLM", {"RefinedWeb", "RefinedWebModel"}, falcon::read_hf_config},
  };
  return table;
}

}  // namespace

void set_size_attributes(const HfSizes& sizes, io::Attributes& a) {
  a["hidden_size"] = sizes.hidden;
  a["intermediate_size"] = sizes.intermediate;
  a["num_hidden_layers"] = sizes.layers;
  a["num_attention_heads"] = sizes.heads;
  a["num_key_value_heads"] = sizes.kv_heads;
  a["vocab_size"] = sizes.vocab;
}

std::string accepted_architectures() {
  const std::vector<HfArchitecture>& table = hf_architectures();
  std::string names;
  for (size_t i = 0; i < table.size(); ++i)
    names += (i == 0 ? "" : i + 1 == table.size() ? " and " : ", ") + table[i].name;
  return names;
}

HfConfigFile::HfConfigFile(json j, std::string file) : j_(std::move(j)), file_(std::move(file)) {
  MESHNN_CHECK(j_.is_object(), "'{}' is not a JSON object", file_);
}

std::optional<int64_t> HfConfigFile::opt_int(const char* key) const {
  if (!has(key)) return std::nullopt;
  const json& v = j_.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9e15)
    return static_cast<int64_t>(v.get<double>());
  throw Error(fmt::format("{}: '{}' must be an integer, got {}", file_, key, v.dump()));
}

int64_t HfConfigFile::positive(const char* key, std::optional<int64_t> fallback) const {
  const std::optional<int64_t> v = opt_int(key);
  MESHNN_CHECK(v || fallback, "{}: '{}' is missing", file_, key);
  const int64_t x = v ? *v : *fallback;
  MESHNN_CHECK(x > 0 && x <= (int64_t{1} << 40), "{}: '{}' must be a positive integer, got {}", file_, key, x);
  return x;
}

std::optional<double> HfConfigFile::opt_real(const char* key) const {
  if (!has(key)) return std::nullopt;
  const json& v = j_.at(key);
  MESHNN_CHECK(v.is_number() && std::isfinite(v.get<double>()), "{}: '{}' must be a number, got {}", file_, key,
               v.dump());
  return v.get<double>();
}

double HfConfigFile::real(const char* key, double fallback) const {
  const std::optional<double> x = opt_real(key);
  if (!x) return fallback;
  MESHNN_CHECK(*x > 0, "{}: '{}' must be a positive number, got {}", file_, key, j_.at(key).dump());
  return *x;
}

std::optional<bool> HfConfigFile::opt_boolean(const char* key) const {
  if (!has(key)) return std::nullopt;
  MESHNN_CHECK(j_.at(key).is_boolean(), "{}: '{}' must be true or false, got {}", file_, key, j_.at(key).dump());
  return j_.at(key).get<bool>();
}

bool HfConfigFile::boolean(const char* key, bool fallback) const { return opt_boolean(key).value_or(fallback); }

std::string HfConfigFile::string(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  MESHNN_CHECK(j_.at(key).is_string(), "{}: '{}' must be a string, got {}", file_, key, j_.at(key).dump());
  return j_.at(key).get<std::string>();
}

HfModelConfig read_hf_config(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path file = dir / "config.json";
  MESHNN_CHECK(fs::is_regular_file(file), "'{}' has no config.json (expected a Hugging Face model directory)", model_dir);
  const HfConfigFile c(read_json(file), file.string());

  HfModelConfig m;
  const std::vector<HfArchitecture>& table = hf_architectures();
  if (c.has("architectures")) {
    const json& arch = c.at("architectures");
    MESHNN_CHECK(arch.is_array() && arch.size() == 1 && arch[0].is_string(),
                 "{}: 'architectures' must be a list of one name, got {}", c.file(), arch.dump());
    m.architecture = arch[0].get<std::string>();
  } else {
    // Old configs without 'architectures' name only the model_type.
    const std::string type = c.string("model_type", "");
    m.architecture = "model_type '" + type + "'";
    for (const HfArchitecture& a : table)
      if (std::find(a.model_types.begin(), a.model_types.end(), type) != a.model_types.end()) m.architecture = a.name;
  }
  const auto known = std::find_if(table.begin(), table.end(),
                                  [&](const HfArchitecture& a) { return a.name == m.architecture; });
  if (known == table.end())
    throw Error(fmt::format("{}: architecture {} is not supported; meshnn-convert accepts {}", c.file(),
                            m.architecture.rfind("model_type", 0) == 0 ? m.architecture : "'" + m.architecture + "'",
                            accepted_architectures()));
  known->read(c, m);
  special_tokens(c, dir, std::get<int64_t>(m.attributes.at("vocab_size")), m);
  return m;
}

}  // namespace meshnn::models
