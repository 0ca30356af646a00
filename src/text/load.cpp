#include "meshnn/text/load.hpp"

#include <fmt/format.h>

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

// tokenizer_config.json's add_bos_token when it gives one, else what the tokenizer itself does.
bool add_bos_token(const std::optional<std::string>& tokenizer_config, const Tokenizer& tokenizer,
                   const std::string& where) {
  if (tokenizer_config) {
    const nlohmann::json j = nlohmann::json::parse(*tokenizer_config, nullptr, /*allow_exceptions=*/false);
    MESHNN_CHECK(!j.is_discarded(), "tokenizer_config.json in {} is not valid JSON", where);
    const auto it = j.find("add_bos_token");
    if (it != j.end() && it->is_boolean()) return it->get<bool>();
  }
  return tokenizer.adds_bos_by_default();
}

std::optional<LoadedTokenizer> load_from(const FileSource& files) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
    const std::optional<std::string> bytes = files.get(name);
    if (!bytes) continue;
    LoadedTokenizer loaded;
    loaded.tokenizer = parse(name, *bytes, files.where);
    loaded.add_bos_token = add_bos_token(files.get("tokenizer_config.json"), *loaded.tokenizer, files.where);
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
  LoadedTokenizer loaded;
  loaded.tokenizer = parse(p.extension() == ".json" ? "tokenizer.json" : "tokenizer.model", read_file(p), path);
  const fs::path config = p.parent_path() / "tokenizer_config.json";
  loaded.add_bos_token =
      add_bos_token(fs::exists(config) ? std::optional(read_file(config)) : std::nullopt, *loaded.tokenizer, path);
  loaded.source = path;
  return loaded;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view prompt, std::optional<int32_t> bos) {
  std::vector<int32_t> ids = tokenizer.encode(prompt);
  if (bos && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
  return ids;
}

}  // namespace meshnn::text
