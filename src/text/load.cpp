#include "meshnn/text/load.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshnn/core/error.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/text/byte_level_bpe.hpp"
#include "meshnn/text/sentencepiece.hpp"

namespace meshnn::text {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MESHNN_CHECK(in.good(), "cannot open '{}'", path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The tokenizer files of a model, wherever they are kept; `get(name)` is nullopt when absent.
struct FileSource {
  std::string where;  // "model.h5" or "the directory d"
  std::function<std::optional<std::string>(const std::string&)> get;
};

TokenizerPtr parse(const std::string& name, const std::string& bytes, const std::string& where) {
  try {
    return name == "tokenizer.model" ? make_sentencepiece(bytes) : make_byte_level_bpe(bytes);
  } catch (const Error& e) {
    throw Error(fmt::format("{} in {}: {}", name, where, e.what()));
  }
}

std::optional<nlohmann::json> parse_json(const std::optional<std::string>& bytes, const char* name,
                                        const std::string& where) {
  if (!bytes) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
  MESHNN_CHECK(!j.is_discarded() && j.is_object(), "{} in {} is not a JSON object", name, where);
  return j;
}

// tokenizer_config.json's add_bos_token when it gives one, else what the tokenizer itself does.
bool add_bos_token(const std::optional<nlohmann::json>& tokenizer_config, const Tokenizer& tokenizer) {
  if (tokenizer_config) {
    const auto it = tokenizer_config->find("add_bos_token");
    if (it != tokenizer_config->end() && it->is_boolean()) return it->get<bool>();
  }
  return tokenizer.adds_bos_by_default();
}

// A separate chat_template.jinja wins over tokenizer_config.json's entry, as in transformers,
// which saves templates that way since 4.43. The entry is a string, or a list of {"name",
// "template"} of which apply_chat_template takes "default" unless told otherwise.
std::optional<std::string> chat_template(const FileSource& files, const std::optional<nlohmann::json>& tokenizer_config) {
  if (std::optional<std::string> jinja = files.get("chat_template.jinja")) return jinja;
  if (!tokenizer_config) return std::nullopt;
  const auto it = tokenizer_config->find("chat_template");
  if (it == tokenizer_config->end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  MESHNN_CHECK(it->is_array(), "tokenizer_config.json in {}: \"chat_template\" must be a string or a list of named templates",
               files.where);
  std::vector<std::string> names;
  for (const nlohmann::json& entry : *it) {
    MESHNN_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                     entry.contains("template") && entry["template"].is_string(),
                 "tokenizer_config.json in {}: each entry of \"chat_template\" must be {{\"name\": ..., \"template\": ...}}",
                 files.where);
    if (entry["name"] == "default") return entry["template"].get<std::string>();
    names.push_back(entry["name"].get<std::string>());
  }
  throw Error(fmt::format("tokenizer_config.json in {} names chat templates [{}] but none \"default\"", files.where,
                          fmt::join(names, ", ")));
}

// A special token is written as its text or as an AddedToken object {"content": text, ...}.
std::optional<std::string> token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> special_tokens(const FileSource& files,
                                                                 const std::optional<nlohmann::json>& tokenizer_config) {
  const std::optional<nlohmann::json> special_map =
      parse_json(files.get("special_tokens_map.json"), "special_tokens_map.json", files.where);
  std::vector<std::pair<std::string, std::string>> tokens;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    for (const std::optional<nlohmann::json>* source : {&tokenizer_config, &special_map}) {
      if (!*source || !(*source)->contains(name)) continue;
      if (std::optional<std::string> text = token_text((**source)[name])) {
        tokens.emplace_back(name, std::move(*text));
        break;
      }
    }
  }
  return tokens;
}

// What comes with the tokenizer proper: tokenizer_config.json's settings and the chat template.
void read_settings(const FileSource& files, LoadedTokenizer& loaded) {
  const std::optional<nlohmann::json> config =
      parse_json(files.get("tokenizer_config.json"), "tokenizer_config.json", files.where);
  loaded.add_bos_token = add_bos_token(config, *loaded.tokenizer);
  loaded.chat_template = chat_template(files, config);
  loaded.special_tokens = special_tokens(files, config);
}

std::optional<LoadedTokenizer> load_from(const FileSource& files) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    const std::optional<std::string> bytes = files.get(name);
    if (!bytes) continue;
    LoadedTokenizer loaded;
    loaded.tokenizer = parse(name, *bytes, files.where);
    read_settings(files, loaded);
    loaded.source = fmt::format("{} in {}", name, files.where);
    return loaded;
  }
  return std::nullopt;
}

}  // namespace

std::optional<LoadedTokenizer> load_tokenizer(const std::string& path) {
  const fs::path p(path);
  MESHNN_CHECK(fs::exists(p), "tokenizer '{}' does not exist", path);
  if (fs::is_directory(p)) {
    return load_from({fmt::format("the directory {}", path), [&](const std::string& name) -> std::optional<std::string> {
                        if (!fs::exists(p / name)) return std::nullopt;
                        return read_file(p / name);
                      }});
  }
  if (io::is_hdf5_file(path)) {
    return load_from({path, [&](const std::string& name) { return io::read_embedded_file_local(path, "tokenizer/" + name); }});
  }
  // A tokenizer file alone: its settings are the files beside it.
  const FileSource beside{path, [&](const std::string& name) -> std::optional<std::string> {
                            const fs::path neighbour = p.parent_path() / name;
                            if (!fs::is_regular_file(neighbour)) return std::nullopt;
                            return read_file(neighbour);
                          }};
  LoadedTokenizer loaded;
  loaded.tokenizer = parse(p.extension() == ".json" ? "tokenizer.json" : "tokenizer.model", read_file(p), path);
  read_settings(beside, loaded);
  loaded.source = path;
  return loaded;
}

ChatTemplate load_chat_template(const std::string& path) {
  const std::string source = read_file(path);
  try {
    return ChatTemplate(source);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", path, e.what()));
  }
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view prompt, std::optional<int32_t> bos) {
  std::vector<int32_t> ids = tokenizer.encode(prompt);
  if (bos && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
  return ids;
}

}  // namespace meshnn::text
