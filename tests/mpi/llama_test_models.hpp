// The Llama MPI tests' shared fixtures (tests/mpi/test_llama*.cpp): synthetic tiny checkpoints
// written once per test process, ragged requests, a generation run on a mesh and comparisons.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "meshnn/models/llama/model.hpp"
#include "meshnn/serving/generator.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::models::llama::test_models {

// The names every Llama MPI test uses (`using namespace test_models` brings them in).
using serving::GenerationOptions;
using serving::GenerationRequest;
using serving::GenerationResult;
using testing::all_ranks_ok;
using testing::world_rank;
using testing::world_size;

// The tiny preset (hidden 112, 8 heads / 2 KV heads of 14, intermediate 200, vocab 250); tied
// embeddings in the second file.
std::string model_file(bool tied);
// The tiny preset with the untied file's weights and Llama 3.1's rope_scaling and/or Mistral's
// sliding window (20 positions: prompts of 31 to 45 tokens run past it, within a tile and across
// tile boundaries).
std::string long_context_file(bool rope_scaling, bool sliding_window);
// The tiny preset with the untied file's weights and a YaRN rope_scaling (factor 4 over an original
// context of 128, attention_factor 1.25): kept, ramped and divided frequencies, a raised context.
std::string yarn_file();
// The same weights with a longrope rope_scaling over an original context of `original` positions
// (the preset's 256 being the stretched one): its short factors for sequences within it, its long
// ones beyond.
std::string longrope_file(int64_t original);
// The tiny preset as Qwen2 writes it: the untied file's weights (same seed, same tensor ids) plus
// q/k/v biases, so that the untied file is this model without its biases.
std::string qwen2_file();
// The tiny preset with head_dim 20 as Qwen3 writes it (per-head q/k norms), or the same weights
// without the norms (model_type "llama"), whose logits must differ.
std::string qwen3_file(bool qk_norm = true);
LlamaConfig config_of(const std::string& file);
// Every mesh shape of n devices.
std::vector<MeshShape> mesh_shapes(int n);
// Ragged prompts crossing tile boundaries (1, 31, 33 and 45 tokens), seeded ids.
std::vector<GenerationRequest> ragged_requests(int64_t vocab, int64_t new_tokens);
// The requests generated on `group` with keep_logits, in `slots` slots of a cache just long enough.
serving::GenerationResult run_on(const std::string& file, const MeshDevicePtr& group, const LlamaOptions& options,
                                 DataType kv_dtype, std::span<const serving::GenerationRequest> requests, int64_t slots,
                                 int64_t prefill_chunk, bool warm_up = false);
// PCC of every generated token's logits against the float64 reference of the same sequence.
double min_pcc_vs_reference(const std::string& file, std::span<const serving::GenerationRequest> requests,
                            const serving::GenerationResult& result, int64_t vocab);
std::vector<std::vector<int32_t>> tokens_of(const serving::GenerationResult& r);
// Every request's tokens and logits, bit for bit.
bool same_bits(const serving::GenerationResult& a, const serving::GenerationResult& b);

}  // namespace meshnn::models::llama::test_models
