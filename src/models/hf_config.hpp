// A Hugging Face config.json read for conversion (internal to src/models): which architecture it
// is, the root attributes meshnn's file carries, and the tensors the configuration implies with
// their shapes, so a checkpoint that disagrees with its own config is refused before anything is
// written.
//
// The driver (hf_config.cpp) reads the files, picks the family reader by architecture and adds
// the special tokens; each family's reader (src/models/<family>/hf_config.cpp) knows its config
// keys and its state_dict names. A new family is a new reader and its rows in the driver's table.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::models {

struct HfModelConfig {
  std::string architecture;  // as config.json names it, e.g. "LlamaForCausalLM"
  io::Attributes attributes;           // root attributes, Hugging Face names
  // Every eos id of config.json and generation_config.json, when they give a list (Llama 3) or more
  // than one id between them; attributes hold the first.
  std::vector<int64_t> eos_token_ids;
  // Tensor name -> the shape config.json implies; every one must be in the checkpoint.
  std::map<std::string, std::vector<int64_t>> expected_tensors;
  // Checkpoint tensors written as several datasets, each a band of consecutive rows, in order (Phi-3's
  // fused qkv_proj and gate_up_proj, which meshnn's Llama loads as q/k/v and gate/up):
  // checkpoint name -> (dataset name, rows) covering all its rows.
  std::map<std::string, std::vector<std::pair<std::string, int64_t>>> row_splits;
  std::string shape_source;  // the config values the shapes come from, for error messages
  // Settings kept in the file that meshnn's jobs do not apply yet, for the user to know.
  std::vector<std::string> warnings;
};

// Typed access to config.json with errors naming the key. `null` counts as absent, as in
// Hugging Face's config classes.
class HfConfigFile {
 public:
  HfConfigFile(nlohmann::json j, std::string file);
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  // Written at all, null included: where null and absent mean different things.
  bool written(const char* key) const { return j_.contains(key); }
  const nlohmann::json& at(const char* key) const { return j_.at(key); }
  const std::string& file() const { return file_; }

  std::optional<int64_t> opt_int(const char* key) const;
  // A size: a positive integer.
  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  // A finite number, or nullopt when absent.
  std::optional<double> opt_real(const char* key) const;
  // A positive finite number.
  double real(const char* key, double fallback) const;
  std::optional<bool> opt_boolean(const char* key) const;
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;

 private:
  nlohmann::json j_;
  std::string file_;
};

// Reads `model_dir`/config.json (and generation_config.json for bos/eos ids config.json lacks).
// Unknown architectures, missing or ill-typed values and unsupported options throw meshnn::Error.
HfModelConfig read_hf_config(const std::string& model_dir);

// The sizes every family's file carries, under the names docs/spec/hdf5.md gives them (Hugging
// Face's), for the family readers to set alike.
struct HfSizes {
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab;
};
void set_size_attributes(const HfSizes& sizes, io::Attributes& a);

// The family readers: the attributes, expected tensors, shape source and warnings of `m` from the
// config `c` (the driver has set m.architecture and adds the special tokens after).
namespace llama {
void read_hf_config(const HfConfigFile& c, HfModelConfig& m);  // Llama, Mistral, Qwen2, Qwen3 and Phi-3
}
namespace falcon {
void read_hf_config(const HfConfigFile& c, HfModelConfig& m);  // Falcon, both config dialects
}

}  // namespace meshnn::models
