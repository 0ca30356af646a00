// Synthetic Llama checkpoints: every dataset of a Hugging Face LlamaForCausalLM state_dict, with
// PyTorch shapes and seeded values, so the Llama job and its tests need no downloads. As for the
// Falcon MLP (models/falcon/synthetic.hpp) each value is a pure function of (seed, tensor id, element
// index): a test recomputes any element without reading the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/models/llama/config.hpp"

namespace meshnn::models::llama {

struct SyntheticLlama {
  LlamaConfig config;
  io::StoredType storage = io::StoredType::BFLOAT16;  // FLOAT32 or BFLOAT16
  uint64_t seed = 1234;
  bool chunked = false;
  int deflate_level = 0;
};

// One dataset of a synthetic checkpoint: element i is offset + io::synthetic_value(seed,
// tensor_id, i, scale), i.e. uniform in [offset - scale, offset + scale).
//
// Tensor ids: model.embed_tokens.weight 1, lm_head.weight 2, model.norm.weight 3; layer i's
// tensors 100 + 16 * i + k with k = 0 input_layernorm, 1 q_proj, 2 k_proj, 3 v_proj, 4 o_proj,
// 5 post_attention_layernorm, 6 gate_proj, 7 up_proj, 8 down_proj, and with config.qkv_bias
// 9 q_proj.bias, 10 k_proj.bias, 11 v_proj.bias (offset 0, scale 1). Token files use
// kTokensTensorId and kPromptLengthsTensorId.
// Scales: Linear weights [out, in] sqrt(3 / in), so outputs keep unit variance; the embedding (and
// an untied lm_head, which is a Linear of fan-in hidden) as named; norm weights offset 1, scale 0.2,
// so that they are not trivially 1.
struct SyntheticTensor {
  std::string key;
  std::vector<int64_t> shape;
  uint64_t tensor_id = 0;
  double scale = 1.0;
  double offset = 0.0;
};

// The datasets written for `config`, in file order: embed_tokens, then per layer input_layernorm,
// q, k, v (then their biases when config.qkv_bias), o, post_attention_layernorm, gate, up, down,
// then model.norm and (unless tie_word_embeddings) lm_head. Throws meshnn::Error when config.validate does.
std::vector<SyntheticTensor> synthetic_llama_tensors(const LlamaConfig& config);

// Element `index` (row-major) of tensor `t` as written with `seed`, before the storage rounding
// (bfloat16 storage holds the bfloat16 rounding of this value).
float synthetic_llama_value(const SyntheticTensor& t, uint64_t seed, int64_t index);

// Writes the checkpoint atomically (io::Hdf5Writer), 64 rows at a time, with root attributes
// config_to_attributes(spec.config) plus meshnn_synthetic_seed. Throws meshnn::Error for an invalid
// config, a storage other than FLOAT32/BFLOAT16, or a file that cannot be written (no partial file
// is left behind).
void write_synthetic_llama(const std::string& file, const SyntheticLlama& spec);

inline constexpr uint64_t kTokensTensorId = 2000000;
inline constexpr uint64_t kPromptLengthsTensorId = 2000001;
inline constexpr uint64_t kMaxNewTokensTensorId = 2000002;

// Writes a prompts file: dataset `tokens` int32 [batch, prompt_len] of seeded ids in [0, vocab);
// with `ragged` also `prompt_lengths` int32 [batch], seeded in [1, prompt_len] with the last
// request exactly prompt_len, and tokens past a prompt's length 0; with max_new_tokens > 0 also
// `max_new_tokens` int32 [batch], seeded in [1, max_new_tokens], the last request exactly that.
// Throws meshnn::Error for non-positive sizes or a vocab above 2^31.
void write_synthetic_tokens(const std::string& file, int64_t batch, int64_t prompt_len, int64_t vocab, bool ragged,
                            uint64_t seed, int64_t max_new_tokens = 0);

}  // namespace meshnn::models::llama
