#include "meshnn/models/hf_convert.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "hf_config.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/io/element_convert.hpp"
#include "meshnn/io/safetensors.hpp"
#include "meshnn/text/chat_template.hpp"
#include "meshnn/text/load.hpp"

namespace meshnn::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One dataset to write: the checkpoint tensor it comes from (a band of its rows, or all of them),
// its name and how it is stored.
struct Planned {
  const io::SafetensorsFile* shard;
  const io::SafetensorsTensor* tensor;
  io::StoredType from, to;
  std::string name;
  int64_t first_row, rows;
};

// The checkpoint's safetensors files, opened and their headers checked; with an index, every
// tensor it lists must be in the shard it names.
std::vector<io::SafetensorsFile> open_shards(const fs::path& dir) {
  std::vector<io::SafetensorsFile> shards;
  const fs::path index_file = dir / "model.safetensors.index.json";
  if (!fs::exists(index_file)) {
    if (fs::exists(dir / "model.safetensors")) {
      shards.emplace_back((dir / "model.safetensors").string());
      return shards;
    }
    const bool pickle = fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "pytorch_model.bin.index.json");
    throw Error(fmt::format("'{}' has neither model.safetensors nor model.safetensors.index.json{}", dir.string(),
                            pickle ? " (only PyTorch pickle weights, which meshnn-convert does not read; save the "
                                     "model with safe_serialization=True)"
                                   : ""));
  }
  json index;
  try {
    index = json::parse(std::ifstream(index_file));
  } catch (const json::exception& e) {
    throw Error(fmt::format("'{}' is not valid JSON ({})", index_file.string(), e.what()));
  }
  MESHNN_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               "'{}' has no 'weight_map' object", index_file.string());
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    MESHNN_CHECK(shard.is_string(), "'{}': weight_map entry '{}' is not a file name", index_file.string(), tensor);
    const std::string name = shard.get<std::string>();
    // Only files beside the index: a name with a path in it could reach anywhere.
    MESHNN_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                 "'{}': tensor '{}' is in '{}', which is not a file name in the model directory", index_file.string(),
                 tensor, name);
    by_shard[name].push_back(tensor);
  }
  MESHNN_CHECK(!by_shard.empty(), "'{}' lists no tensors", index_file.string());
  for (const auto& [name, tensors] : by_shard) {
    MESHNN_CHECK(fs::is_regular_file(dir / name), "'{}' lists shard '{}' (holding '{}'), which is missing from '{}'",
                 index_file.string(), name, tensors.front(), dir.string());
    shards.emplace_back((dir / name).string());
    for (const std::string& t : tensors)
      MESHNN_CHECK(shards.back().find(t) != nullptr,
                   "tensor '{}' is listed in model.safetensors.index.json as in '{}', but that file has no such tensor", t,
                   name);
  }
  return shards;
}

std::vector<Planned> plan(const std::vector<io::SafetensorsFile>& shards, const HfModelConfig& config,
                          const ConvertOptions& options) {
  std::vector<Planned> planned;
  std::map<std::string, const io::SafetensorsFile*> seen;
  for (const io::SafetensorsFile& shard : shards) {
    for (const io::SafetensorsTensor& t : shard.tensors()) {
      const auto [it, fresh] = seen.emplace(t.name, &shard);
      MESHNN_CHECK(fresh, "tensor '{}' is in both '{}' and '{}'", t.name, it->second->path(), shard.path());
      MESHNN_CHECK(!t.shape.empty(), "tensor '{}' in '{}' is a scalar; meshnn stores tensors of at least one dim",
                   t.name, shard.path());
      const io::StoredType from = io::stored_type_of(t.dtype, t.name);
      const io::StoredType to = options.dtype.value_or(from);
      const auto split = config.row_splits.find(t.name);
      if (split == config.row_splits.end()) {
        planned.push_back({&shard, &t, from, to, t.name, 0, t.shape[0]});
        continue;
      }
      // A split tensor is an expected one: its shape, checked below, has as many rows as its bands.
      int64_t first_row = 0;
      for (const auto& [name, rows] : split->second) {
        planned.push_back({&shard, &t, from, to, name, first_row, rows});
        first_row += rows;
      }
    }
  }
  for (const auto& [name, shape] : config.expected_tensors) {
    const auto it = seen.find(name);
    MESHNN_CHECK(it != seen.end(), "tensor '{}' is missing from the checkpoint (config.json: {})", name,
                 config.shape_source);
    const io::SafetensorsTensor& t = *it->second->find(name);
    MESHNN_CHECK(t.shape == shape, "tensor '{}' in '{}' has shape [{}], but config.json ({}) implies [{}]", name,
                 it->second->path(), fmt::join(t.shape, ", "), config.shape_source, fmt::join(shape, ", "));
  }
  return planned;
}

// Writes a tensor a block of rows at a time, releasing each block's source pages once written, so
// the resident memory stays about one block, however large the tensor (a Llama 3 embedding is 1 GB).
// The block is counted in the larger of source and stored bytes, so it bounds both the mapped pages
// held and the staging buffer.
void write_tensor(io::Hdf5Writer& writer, const Planned& p, size_t block_bytes, std::vector<std::byte>& staging) {
  const io::SafetensorsTensor& t = *p.tensor;
  std::vector<int64_t> shape = t.shape;
  shape[0] = p.rows;
  writer.create_dataset(p.name, shape, p.to);
  const std::span<const std::byte> bytes = p.shard->bytes(t);
  int64_t row_size = 1;
  for (size_t d = 1; d < t.shape.size(); ++d) row_size *= t.shape[d];
  const size_t row_bytes = static_cast<size_t>(row_size) * std::max(t.element_size, io::stored_size(p.to));
  const int64_t block_rows = std::max<int64_t>(1, static_cast<int64_t>(block_bytes / std::max<size_t>(row_bytes, 1)));
  for (int64_t r = 0; r < p.rows; r += block_rows) {
    const int64_t rows = std::min(block_rows, p.rows - r);
    const size_t count = static_cast<size_t>(rows * row_size);
    const uint64_t begin = static_cast<uint64_t>((p.first_row + r) * row_size) * t.element_size;
    const std::span<const std::byte> block = bytes.subspan(begin, count * t.element_size);
    if (p.from == p.to) {
      // The mapped bytes go to HDF5 as they are: no copy in this process.
      writer.write_stored_rows(p.name, r, block);
    } else {
      staging.resize(count * io::stored_size(p.to));
      io::convert_elements(p.from, block.data(), p.to, staging.data(), count);
      writer.write_stored_rows(p.name, r, staging);
    }
    p.shard->release(t, begin, begin + block.size());
  }
}

void copy_tokenizer_files(io::Hdf5Writer& writer, const fs::path& dir, ConvertSummary& summary) {
  for (const std::string& name : hf_tokenizer_files()) {
    const fs::path path = dir / name;
    if (!fs::is_regular_file(path)) continue;
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    MESHNN_CHECK(!in.bad(), "cannot read '{}'", path.string());
    writer.write_bytes("tokenizer/" + name, std::as_bytes(std::span<const char>(bytes)));
    summary.tokenizer_files.push_back(name);
  }
}

// The tokenizer files are copied as they are; what meshnn-llm will not be able to use of them is
// said now, while the user still has the directory, rather than at the first text prompt.
void check_tokenizer_use(const std::string& model_dir, ConvertSummary& summary) {
  if (summary.tokenizer_files.empty()) return;
  std::optional<text::LoadedTokenizer> tokenizer;
  try {
    tokenizer = text::load_tokenizer(model_dir);
  } catch (const Error& e) {
    summary.warnings.push_back(fmt::format("meshnn-llm cannot use this tokenizer (token ids still work): {}", e.what()));
    return;
  }
  if (!tokenizer || !tokenizer->chat_template) return;
  try {
    text::ChatTemplate parsed(*tokenizer->chat_template);
  } catch (const Error& e) {
    summary.warnings.push_back(
        fmt::format("meshnn-llm cannot run this model's chat template (--chat will need --chat-template FILE): {}",
                    e.what()));
  }
}

}  // namespace

const std::vector<std::string>& hf_tokenizer_files() {
  static const std::vector<std::string> names = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json", "generation_config.json", "chat_template.jinja"};
  return names;
}

ConvertSummary convert_hf_checkpoint(const std::string& model_dir, const std::string& output,
                                     const ConvertOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  MESHNN_CHECK(fs::is_directory(model_dir), "'{}' is not a directory (expected a Hugging Face model directory)", model_dir);
  MESHNN_CHECK(!options.dtype || *options.dtype == io::StoredType::FLOAT32 ||
                   *options.dtype == io::StoredType::BFLOAT16,
               "weights are converted to float32 or bfloat16, not {}", io::to_string(*options.dtype));
  const fs::path dir(model_dir);
  ConvertSummary summary;
  const HfModelConfig config = read_hf_config(model_dir);
  summary.architecture = config.architecture;
  summary.warnings = config.warnings;
  const std::vector<io::SafetensorsFile> shards = open_shards(dir);
  for (const io::SafetensorsFile& s : shards) summary.shards.push_back(fs::path(s.path()).filename().string());
  const std::vector<Planned> planned = plan(shards, config, options);

  io::Hdf5Writer writer(output);
  std::vector<std::byte> staging;
  for (const Planned& p : planned) {
    write_tensor(writer, p, options.block_bytes, staging);
    const uint64_t elements = static_cast<uint64_t>(p.tensor->elements() / p.tensor->shape[0] * p.rows);
    summary.bytes_read += elements * p.tensor->element_size;
    summary.bytes_written += elements * io::stored_size(p.to);
    ++summary.tensors;
  }
  for (const auto& [name, value] : config.attributes) writer.set_attribute(name, value);
  if (!config.eos_token_ids.empty()) writer.set_int_array_attribute("eos_token_ids", config.eos_token_ids);
  writer.set_attribute("meshnn_source_architecture", config.architecture);
  copy_tokenizer_files(writer, dir, summary);
  // Falcon's files run the MLP job, which reads no tokenizer.
  const auto type = config.attributes.find("model_type");
  const bool text_job = type == config.attributes.end() || type->second != io::AttributeValue(std::string("falcon"));
  if (text_job) check_tokenizer_use(model_dir, summary);
  writer.commit();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace meshnn::models
