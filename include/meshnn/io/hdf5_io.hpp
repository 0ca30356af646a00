// Weights and activations in HDF5, read shard by shard (layout: docs/spec/hdf5.md).
//
// Every rank opens the file read-only and reads only the part of a dataset its shard needs (plus
// tile padding), converting on the fly to the dtype and layout the run asks for. A PyTorch Linear
// weight [out_features, in_features] is transposed on load to the [K, N] = [in, out] the kernels
// use, one 32-row block at a time, so no rank ever holds a whole weight or a float32 copy of its
// shard.
//
// Failure model: problems found while reading (missing dataset, wrong shape or element type,
// truncated or corrupt file, NaN/inf in weights) can differ between ranks, so each load ends with
// an agreement step and then throws the same meshnn::Error on every rank, naming the file, the
// dataset and what was expected. All loaders are therefore collective over the mesh.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "meshnn/distributed/distribute.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn::io {

// How a dataset's elements are stored: native float32 / float16 / int32 / int64, or bfloat16 as
// uint16 with the attribute dtype = "bfloat16".
enum class StoredType { FLOAT32, FLOAT16, BFLOAT16, INT32, INT64 };
std::string_view to_string(StoredType t);

struct DatasetInfo {
  std::vector<int64_t> shape;
  StoredType type = StoredType::FLOAT32;
};

struct LoadOptions {
  DataType dtype = DataType::BFLOAT16;
  Layout layout = Layout::TILE;
  // Linear weights: stored [out, in], wanted [in, out]. Only for 2-D datasets.
  bool transpose = false;
  // When set, the stored shape must equal this (before any transpose), else an error.
  std::optional<std::vector<int64_t>> expected_shape;
  // Reject NaN and inf values (on for weights).
  bool reject_non_finite = true;
};

// Loads `dataset` of `file` into a mesh tensor placed by `mapper` (placements refer to the tensor
// as loaded, i.e. after the transpose). Collective over the mesh.
MeshTensor load_tensor(const std::string& file, const std::string& dataset, const MeshMapperConfig& mapper,
                       const MeshDevicePtr& mesh, const LoadOptions& options);

// The model configuration in the root attributes, by Hugging Face config.json names (model_type,
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
// head_dim, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta, tie_word_embeddings,
// bos_token_id, eos_token_id, rope_scaling, sliding_window; meshnn_synthetic_seed). Other attributes are not read; absent
// attributes are absent from the map; integers come back as int64_t, reals as double, strings as
// string.
using AttributeValue = std::variant<int64_t, double, std::string>;
using Attributes = std::map<std::string, AttributeValue>;
Attributes read_root_attributes(const std::string& file, const MeshDevicePtr& mesh);
// An integer attribute that must exist ("'hidden_size' missing from root attributes of f.h5").
int64_t required_int_attribute(const Attributes& attrs, const std::string& name, const std::string& file);

// Shape and element type of a dataset, collective (same error on every rank).
DatasetInfo inspect_dataset(const std::string& file, const std::string& dataset, const MeshDevicePtr& mesh);

// Rank-local forms (no agreement step: they throw meshnn::Error on this rank only), for tools,
// single-process programs and the loader's fuzz target.
DatasetInfo inspect_dataset_local(const std::string& file, const std::string& dataset);
Attributes read_root_attributes_local(const std::string& file);
// The whole dataset as float32 values, validated as load_tensor validates (shape, type, finiteness).
std::vector<float> read_dataset_local(const std::string& file, const std::string& dataset, const LoadOptions& options);
// The whole of an integer dataset (token ids, prompt lengths), row-major, widened to int64. The
// dataset must be stored as INT32 or INT64; any other element type (floats, bfloat16) throws
// meshnn::Error naming the file, the dataset and the type found. `info`, when given, receives the
// shape and stored type.
std::vector<int64_t> read_int_dataset_local(const std::string& file, const std::string& dataset,
                                            DatasetInfo* info = nullptr);
// A 1-D integer attribute of the root group (e.g. eos_token_ids); empty when absent or not one.
std::vector<int64_t> read_int_array_attribute_local(const std::string& file, const std::string& name);
// Whether `file` is an HDF5 file (false for a missing or other file; never throws).
bool is_hdf5_file(const std::string& file);
// A file carried inside the HDF5 file (Hdf5Writer::write_bytes: a 1-D uint8 dataset; `name` may
// hold '/', e.g. "tokenizer/tokenizer.json"); nullopt when there is none of that name. A dataset
// of that name that is not 1-D uint8 throws meshnn::Error.
std::optional<std::string> read_embedded_file_local(const std::string& file, const std::string& name);

// Rank-local writing, atomic: everything goes to "<file>.tmp.<pid>", renamed over `file` only by
// commit() after a clean close, so a failure never leaves a half-written file (the destructor of an
// uncommitted writer deletes the temporary). Errors throw meshnn::Error (rank-local: call it on the
// rank that writes and agree afterwards).
class Hdf5Writer {
 public:
  explicit Hdf5Writer(std::string file);
  ~Hdf5Writer();
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  // A dataset of `shape` (rank >= 1) stored as FLOAT32, FLOAT16 (IEEE half), BFLOAT16 (uint16 +
  // attribute dtype="bfloat16") or INT32 (native int32: token ids); chunked (row blocks) and
  // optionally deflate-compressed (level 1-9, 0 = off). Other types throw meshnn::Error. A name
  // with '/' creates the groups before it. FLOAT16 datasets are filled with write_stored_rows.
  void create_dataset(const std::string& name, const std::vector<int64_t>& shape, StoredType type,
                      bool chunked = false, int deflate_level = 0);
  // Rows [row_begin, row_begin + values.size() / row_size) along the first dim, row-major; the row
  // size is the product of the dims after the first (1 for a rank-1 dataset). Floats go to FLOAT32
  // or BFLOAT16 datasets, int32 values to INT32 datasets; a mismatch, or values that are not whole
  // rows inside the dataset, throws meshnn::Error.
  void write_rows(const std::string& name, int64_t row_begin, std::span<const float> values);
  void write_rows(const std::string& name, int64_t row_begin, std::span<const int32_t> values);
  // Whole rows given as bytes already in the dataset's stored format (little-endian float32,
  // float16, bfloat16 bits or int32), written without conversion: a converter's fast path.
  void write_stored_rows(const std::string& name, int64_t row_begin, std::span<const std::byte> bytes);
  // A 1-D uint8 dataset holding `bytes` (a file carried inside the HDF5 file); '/' makes groups.
  void write_bytes(const std::string& name, std::span<const std::byte> bytes);
  // A 1-D dataset of variable-length UTF-8 strings (h5py reads it as an array of str); each string
  // ends at its first NUL byte, as C strings do.
  void write_strings(const std::string& name, std::span<const std::string> values);
  // A 1-D int64 attribute on the root group (e.g. a list of token ids).
  void set_int_array_attribute(const std::string& name, std::span<const int64_t> values);
  void set_attribute(const std::string& name, const AttributeValue& value);  // on the root group
  void commit();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Convenience: a file of float32 datasets holding tensors' logical values plus root attributes.
struct NamedTensor {
  std::string dataset;
  const Tensor* tensor;
};
void write_file(const std::string& file, const std::vector<NamedTensor>& tensors, const Attributes& root_attributes);

}  // namespace meshnn::io
