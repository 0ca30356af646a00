// A Hugging Face config.json read for conversion (internal to src/io): which family the
// architecture is, the root attributes meshnn's file carries, and the tensors the configuration
// implies with their shapes, so a checkpoint that disagrees with its own config is refused before
// anything is written.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::io::detail {

enum class HfFamily { LLAMA, FALCON };

struct HfModelConfig {
  std::string architecture;  // as config.json names it, e.g. "LlamaForCausalLM"
  HfFamily family = HfFamily::LLAMA;
  Attributes attributes;              // root attributes, Hugging Face names
  std::vector<int64_t> eos_token_ids;  // when config gives a list (Llama 3); attributes hold the first
  // Tensor name -> the shape config.json implies; every one must be in the checkpoint.
  std::map<std::string, std::vector<int64_t>> expected_tensors;
  std::string shape_source;  // the config values the shapes come from, for error messages
  // Settings kept in the file that meshnn's jobs do not apply yet, for the user to know.
  std::vector<std::string> warnings;
};

// Reads `model_dir`/config.json (and generation_config.json for bos/eos ids config.json lacks).
// Unknown architectures, missing or ill-typed values and unsupported options throw meshnn::Error.
HfModelConfig read_hf_config(const std::string& model_dir);

}  // namespace meshnn::io::detail
