// Hugging Face model directory -> one meshnn HDF5 file (docs/converting.md).
//
// Reads config.json, the safetensors weights (model.safetensors, or the shards that
// model.safetensors.index.json lists) and the tokenizer files, and writes the layout meshnn's
// loaders read: one dataset per tensor named by its state_dict key, the configuration in root
// attributes with Hugging Face names, and the tokenizer files as uint8 datasets under tokenizer/.
// Tensors stream one at a time from the memory-mapped shards, so the converter holds about one
// tensor, not the model.
//
// Everything that can be checked before writing is checked first (architecture, config values,
// every header, every tensor's dtype and the shape the config implies); the output is written to
// a temporary name and renamed at the end, so any failure throws meshnn::Error and leaves no file.
//
// In models, not io, because reading config.json means knowing the model families: which
// architectures there are and the tensors each configuration implies (src/models/hf_config.hpp,
// one reader per family folder). io supplies the model-agnostic parts: safetensors, the HDF5
// writer, element conversion.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::models {

struct ConvertOptions {
  // Storage type of the weights: nullopt keeps each tensor's own (F32, F16, BF16); FLOAT32 or
  // BFLOAT16 converts (bfloat16 rounds to nearest even).
  std::optional<io::StoredType> dtype;
  // Bytes of a tensor handled per write (at least one row): the resident memory a conversion
  // needs is about this, plus the program.
  size_t block_bytes = size_t{16} << 20;
};

struct ConvertSummary {
  std::string architecture;
  int64_t tensors = 0;  // datasets written (a fused checkpoint tensor may give several)
  uint64_t bytes_read = 0, bytes_written = 0;  // tensor data only
  std::vector<std::string> shards, tokenizer_files;
  // Settings the file keeps that meshnn's jobs will refuse (a rope_scaling type they do not apply).
  std::vector<std::string> warnings;
  double seconds = 0;
};

// The tokenizer and generation files copied, when present, to tokenizer/<name>.
const std::vector<std::string>& hf_tokenizer_files();

// The architectures the converter accepts, as "A, B and C" (the converter's help and its error on
// any other name them from the same table).
std::string accepted_architectures();

ConvertSummary convert_hf_checkpoint(const std::string& model_dir, const std::string& output,
                                     const ConvertOptions& options = {});

}  // namespace meshnn::models
