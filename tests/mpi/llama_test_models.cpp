#include "llama_test_models.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/ops/pcc.hpp"
#include "support/llama_reference.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::models::llama::test_models {
namespace {


// A synthetic checkpoint of the tiny preset, changed by `configure`, written once per test process
// by rank 0 (float32 storage) and named by `tag`; every rank gets the path.
template <class Configure>
std::string shared_tiny_file(const std::string& tag, uint64_t seed, Configure&& configure) {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string f = fmt::format("{}/meshnn_llama_test_{}_{}.h5", ::testing::TempDir(), pid, tag);
  if (world_rank() == 0) {
    SyntheticLlama spec;
    spec.config = llama_preset("tiny");
    configure(spec.config);
    spec.storage = io::StoredType::FLOAT32;
    spec.seed = seed;
    write_synthetic_llama(f, spec);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return f;
}

}  // namespace

std::string model_file(bool tied) {
  static std::string files[2];
  std::string& f = files[tied ? 1 : 0];
  if (f.empty())
    f = shared_tiny_file(tied ? "tied" : "untied", tied ? 7 : 5, [&](LlamaConfig& c) { c.tie_word_embeddings = tied; });
  return f;
}

std::string long_context_file(bool rope_scaling, bool sliding_window) {
  return shared_tiny_file(fmt::format("rope{}_window{}", int{rope_scaling}, int{sliding_window}), 5, [&](LlamaConfig& c) {
    // Frequencies on every side of the llama3 bands: wavelengths 6 and 23 under 128 / 4 are kept,
    // 86 is interpolated, 316 and longer over 128 / 1 are divided.
    if (rope_scaling) c.rope_scaling = {RopeScaling::Type::LLAMA3, 8.0, 1.0, 4.0, 128};
    if (sliding_window) c.sliding_window = 20;
  });
}

std::string yarn_file() {
  static const std::string f = shared_tiny_file("yarn", 5, [](LlamaConfig& c) {
    // head_dim 14, theta 10^4, original context 128: pair 0 kept, pairs 1 and 2 on the ramp (a third
    // and two thirds divided), pairs 3-6 divided by 4. The context becomes 512 (the preset has 256),
    // and cos and sin are multiplied by 1.25 (the file's own attention_factor).
    c.rope_scaling.type = RopeScaling::Type::YARN;
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 128;
    c.rope_scaling.attention_factor = 1.25;
  });
  return f;
}

std::string longrope_file(int64_t original) {
  return shared_tiny_file(fmt::format("longrope{}", original), 5, [&](LlamaConfig& c) {
    // 7 rotary pairs (head_dim 14); the long factors stretch the low frequencies far more.
    c.rope_scaling.type = RopeScaling::Type::LONGROPE;
    c.rope_scaling.short_factor = {1.0, 1.0, 1.1, 1.2, 1.5, 2.0, 3.0};
    c.rope_scaling.long_factor = {1.0, 1.5, 2.5, 4.0, 8.0, 16.0, 32.0};
    c.rope_scaling.original_max_position_embeddings = original;
    c.rope_scaling.attention_factor = std::sqrt(1.0 + std::log(256.0 / original) / std::log(double(original)));
  });
}

std::string qwen2_file() {
  static const std::string f = shared_tiny_file("qwen2", 5, [](LlamaConfig& c) { c.qkv_bias = true; });
  return f;
}

std::string qwen3_file(bool qk_norm) {
  // head_dim 20 beside a hidden of 112 / 8 heads: the projections' widths are not hidden's, as in
  // Qwen3-0.6B (16 heads of 128 beside 1024).
  static std::string files[2];
  std::string& f = files[qk_norm ? 1 : 0];
  if (f.empty())
    f = shared_tiny_file(qk_norm ? "qwen3" : "qwen3_without_norms", 5, [&](LlamaConfig& c) {
      c.head_dim = 20;
      c.qk_norm = qk_norm;
    });
  return f;
}

LlamaConfig config_of(const std::string& file) {
  return config_from_attributes(io::read_root_attributes_local(file), file);
}

std::vector<MeshShape> mesh_shapes(int n) {
  std::vector<MeshShape> shapes;
  for (int r = 1; r <= n; ++r)
    if (n % r == 0) shapes.push_back({r, n / r});
  return shapes;
}

std::vector<GenerationRequest> ragged_requests(int64_t vocab, int64_t new_tokens) {
  std::vector<GenerationRequest> requests;
  const int64_t lengths[] = {33, 1, 45, 31};
  for (size_t i = 0; i < std::size(lengths); ++i) {
    GenerationRequest r;
    r.id = i;
    r.max_new_tokens = new_tokens;
    const std::vector<float> v = testing::seeded_values(lengths[i], 100 + i);
    for (float x : v) r.prompt.push_back(static_cast<int32_t>((x + 1.0f) * 0.5f * (vocab - 1)));
    requests.push_back(std::move(r));
  }
  return requests;
}

GenerationResult run_on(const std::string& file, const MeshDevicePtr& group, const LlamaOptions& options,
                        DataType kv_dtype, std::span<const GenerationRequest> requests, int64_t slots,
                        int64_t prefill_chunk, bool warm_up) {
  LlamaConfig config = config_of(file);
  int64_t longest = 0;
  for (const auto& r : requests) longest = std::max<int64_t>(longest, r.prompt.size() + r.max_new_tokens);
  select_rope_factors(config, longest);  // as the job does
  const LlamaModel model = LlamaModel::load(file, config, group, options);
  serving::KvCache cache = model.make_cache(slots, longest, kv_dtype);
  GenerationOptions go;
  go.keep_logits = true;
  go.prefill_chunk = prefill_chunk;
  if (warm_up) serving::warm_up(model, cache, 3 * prefill_chunk, slots);  // more rows than one slot holds
  return serving::generate(model, cache, requests, go);
}

double min_pcc_vs_reference(const std::string& file, std::span<const GenerationRequest> requests,
                            const GenerationResult& result, int64_t vocab) {
  double worst = 1.0;
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<int32_t> sequence = requests[i].prompt;
    const auto& out = result.outputs[i];
    sequence.insert(sequence.end(), out.tokens.begin(), out.tokens.end() - 1);
    const auto reference = testing::llama_reference_logits(file, sequence);
    for (size_t t = 0; t < out.tokens.size(); ++t) {
      const auto& row = reference[requests[i].prompt.size() - 1 + t];
      const std::vector<float> expected(row.begin(), row.end());
      const std::span<const float> got(out.logits.data() + t * vocab, static_cast<size_t>(vocab));
      worst = std::min(worst, pcc(expected, got));
    }
  }
  return worst;
}

std::vector<std::vector<int32_t>> tokens_of(const GenerationResult& r) {
  std::vector<std::vector<int32_t>> t;
  for (const auto& o : r.outputs) t.push_back(o.tokens);
  return t;
}

bool same_bits(const GenerationResult& a, const GenerationResult& b) {
  bool same = tokens_of(a) == tokens_of(b) && a.outputs.size() == b.outputs.size();
  for (size_t i = 0; same && i < a.outputs.size(); ++i) same = a.outputs[i].logits == b.outputs[i].logits;
  return same;
}

}  // namespace meshnn::models::llama::test_models
