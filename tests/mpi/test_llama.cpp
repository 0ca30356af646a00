// The Llama model on every mesh shape of the run's size, in tp, 2d, dp and hybrid: logits against an
// independent float64 implementation (tests/support/llama_reference), greedy tokens against the
// single-device run, KV-cache consistency across ragged prompts, chunked prefill and tile
// boundaries, Llama 3.1's rope_scaling, Mistral's sliding window and Qwen2's q/k/v biases,
// continuous batching against solo runs, determinism, and bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

#include "meshnn/models/llama/model.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/models/parallel.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/serving/generator.hpp"
#include "support/llama_reference.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::models::llama {
namespace {

using serving::GenerationOptions;
using serving::GenerationRequest;
using serving::GenerationResult;
using testing::all_ranks_ok;
using testing::world_rank;
using testing::world_size;

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

// The tiny preset (hidden 112, 8 heads / 2 KV heads of 14, intermediate 200, vocab 250); tied
// embeddings in the second file.
std::string model_file(bool tied) {
  static std::string files[2];
  std::string& f = files[tied ? 1 : 0];
  if (f.empty())
    f = shared_tiny_file(tied ? "tied" : "untied", tied ? 7 : 5, [&](LlamaConfig& c) { c.tie_word_embeddings = tied; });
  return f;
}

// The tiny preset with the untied file's weights and Llama 3.1's rope_scaling and/or Mistral's
// sliding window (20 positions: prompts of 31 to 45 tokens run past it, within a tile and across
// tile boundaries).
std::string long_context_file(bool rope_scaling, bool sliding_window) {
  return shared_tiny_file(fmt::format("rope{}_window{}", int{rope_scaling}, int{sliding_window}), 5, [&](LlamaConfig& c) {
    // Frequencies on every side of the llama3 bands: wavelengths 6 and 23 under 128 / 4 are kept,
    // 86 is interpolated, 316 and longer over 128 / 1 are divided.
    if (rope_scaling) c.rope_scaling = {RopeScaling::Type::LLAMA3, 8.0, 1.0, 4.0, 128};
    if (sliding_window) c.sliding_window = 20;
  });
}

// The tiny preset as Qwen2 writes it: the untied file's weights (same seed, same tensor ids) plus
// q/k/v biases, so that the untied file is this model without its biases.
std::string qwen2_file() {
  static const std::string f = shared_tiny_file("qwen2", 5, [](LlamaConfig& c) { c.qkv_bias = true; });
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

// Ragged prompts crossing tile boundaries (1, 31, 33 and 45 tokens), seeded ids.
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

struct Run {
  GenerationResult result;
};

GenerationResult run_on(const std::string& file, const MeshDevicePtr& group, const LlamaOptions& options,
                        DataType kv_dtype, std::span<const GenerationRequest> requests, int64_t slots,
                        int64_t prefill_chunk, bool warm_up = false) {
  const LlamaConfig config = config_of(file);
  const LlamaModel model = LlamaModel::load(file, config, group, options);
  int64_t longest = 0;
  for (const auto& r : requests) longest = std::max<int64_t>(longest, r.prompt.size() + r.max_new_tokens);
  serving::KvCache cache = model.make_cache(slots, longest, kv_dtype);
  GenerationOptions go;
  go.keep_logits = true;
  go.prefill_chunk = prefill_chunk;
  if (warm_up) serving::warm_up(model, cache, 3 * prefill_chunk, slots);  // more rows than one slot holds
  return serving::generate(model, cache, requests, go);
}

// PCC of every generated token's logits against the float64 reference of the same sequence.
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

// Every request's tokens and logits, bit for bit.
bool same_bits(const GenerationResult& a, const GenerationResult& b) {
  bool same = tokens_of(a) == tokens_of(b) && a.outputs.size() == b.outputs.size();
  for (size_t i = 0; same && i < a.outputs.size(); ++i) same = a.outputs[i].logits == b.outputs[i].logits;
  return same;
}

// Every mesh shape of this run's size, every mode: the float32 logits against float64 and the
// greedy tokens against the single-device run.
void check_every_mode(const std::string& file, const std::string& label) {
  const LlamaConfig config = config_of(file);
  LlamaOptions options{DataType::FLOAT32, DataType::FLOAT32};
  const auto requests = ragged_requests(config.vocab_size, 6);
  auto self = MeshDevice::open({1, 1}, Topology::RING, MPI_COMM_SELF);
  const GenerationResult single = run_on(file, self, options, DataType::FLOAT32, requests, 4, 512);
  const double single_pcc = min_pcc_vs_reference(file, requests, single, config.vocab_size);
  EXPECT_TRUE(all_ranks_ok(single_pcc >= 0.9999)) << "single device: PCC " << single_pcc;

  for (MeshShape ms : mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (ParallelMode mode : {ParallelMode::TP, ParallelMode::TWO_D, ParallelMode::DP, ParallelMode::HYBRID}) {
      MeshDevicePtr group = mesh;
      if (mode == ParallelMode::DP || mode == ParallelMode::HYBRID)
        group = mesh->create_submeshes(mode == ParallelMode::DP ? MeshShape{1, 1} : MeshShape{1, ms.cols}).mine;
      LlamaOptions o = options;
      o.sharding = mode == ParallelMode::TWO_D ? LlamaSharding::TWO_D : LlamaSharding::TENSOR_PARALLEL;
      const GenerationResult r = run_on(file, group, o, DataType::FLOAT32, requests, 4, 512);
      const double p = min_pcc_vs_reference(file, requests, r, config.vocab_size);
      EXPECT_TRUE(all_ranks_ok(p >= 0.9999 && tokens_of(r) == tokens_of(single)))
          << ms.to_string() << " " << to_string(mode) << " " << label << ": min PCC vs float64 " << p
          << ", tokens equal the single-device run: " << (tokens_of(r) == tokens_of(single));
    }
  }
}

TEST(Llama, Float32LogitsMatchFloat64InEveryModeAndMesh) { check_every_mode(model_file(false), "untied"); }
TEST(Llama, TiedEmbeddingsMatchFloat64InEveryModeAndMesh) { check_every_mode(model_file(true), "tied"); }
TEST(Llama, RopeScalingAndSlidingWindowMatchFloat64InEveryModeAndMesh) {
  check_every_mode(long_context_file(true, true), "llama3 rope_scaling, sliding window 20");
}

TEST(Llama, Qwen2QkvBiasesMatchFloat64InEveryModeAndMesh) {
  // 2d adds the biases on one mesh row only; dp and hybrid on every replica.
  check_every_mode(qwen2_file(), "qwen2 q/k/v biases");
}

// The comparison above can fail: the reference of the same weights without the biases is far from
// the model with them.
TEST(Llama, Qwen2QkvBiasesChangeTheLogits) {
  const std::string with = qwen2_file();
  const LlamaConfig config = config_of(with);
  const auto requests = ragged_requests(config.vocab_size, 6);
  auto self = MeshDevice::open({1, 1}, Topology::RING, MPI_COMM_SELF);
  const GenerationResult r =
      run_on(with, self, {DataType::FLOAT32, DataType::FLOAT32}, DataType::FLOAT32, requests, 4, 512);
  const double p = min_pcc_vs_reference(model_file(false), requests, r, config.vocab_size);
  EXPECT_TRUE(all_ranks_ok(p < 0.999)) << "the reference without the biases still reaches PCC " << p;
}

// The comparison above can fail: the reference without either setting is far from the model with both.
TEST(Llama, RopeScalingAndSlidingWindowEachChangeTheLogits) {
  const std::string both = long_context_file(true, true);
  const LlamaConfig config = config_of(both);
  const auto requests = ragged_requests(config.vocab_size, 6);
  auto self = MeshDevice::open({1, 1}, Topology::RING, MPI_COMM_SELF);
  const GenerationResult r =
      run_on(both, self, {DataType::FLOAT32, DataType::FLOAT32}, DataType::FLOAT32, requests, 4, 512);
  for (const auto& [file, missing] : {std::pair{long_context_file(false, true), "rope_scaling"},
                                      std::pair{long_context_file(true, false), "sliding window"}}) {
    const double p = min_pcc_vs_reference(file, requests, r, config.vocab_size);
    EXPECT_TRUE(all_ranks_ok(p < 0.999)) << "the reference without the " << missing << " still reaches PCC " << p;
  }
}

// Compact formats on the tp mesh: the logits stay close to float64 (looser: weights and cache are
// quantised) and to the float32 run.
// Also with Qwen2's biases, which the bfloat16 products' epilogue adds.
TEST(Llama, CompactWeightsAndCacheStayClose) {
  for (const std::string& file : {model_file(false), qwen2_file()}) {
    const LlamaConfig config = config_of(file);
    const auto requests = ragged_requests(config.vocab_size, 4);
    auto mesh = MeshDevice::open({1, world_size()});
    struct Case {
      DataType weights, acts, kv;
      double min_pcc;
    };
    for (const Case& c : {Case{DataType::BFLOAT16, DataType::BFLOAT16, DataType::BFLOAT16, 0.995},
                          Case{DataType::BFLOAT8_B, DataType::BFLOAT16, DataType::BFLOAT8_B, 0.99},
                          Case{DataType::BFLOAT4_B, DataType::BFLOAT16, DataType::BFLOAT16, 0.95}}) {
      const GenerationResult r = run_on(file, mesh, {c.weights, c.acts}, c.kv, requests, 4, 512);
      const double p = min_pcc_vs_reference(file, requests, r, config.vocab_size);
      EXPECT_TRUE(all_ranks_ok(p >= c.min_pcc))
          << file << ": " << to_string(c.weights) << " weights, " << to_string(c.kv) << " cache: min PCC vs float64 "
          << p << " (need " << c.min_pcc << ")";
    }
  }
}

// Prefilling in chunks of 16 (a prompt of 45 crosses two chunk and tile boundaries), then decoding,
// gives the logits of prefilling whole: the cache holds what a full prefill would have computed.
TEST(Llama, ChunkedPrefillAndDecodeMatchWholePrefill) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto requests = ragged_requests(config.vocab_size, 5);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaOptions options{DataType::FLOAT32, DataType::FLOAT32};
  const GenerationResult whole = run_on(file, mesh, options, DataType::FLOAT32, requests, 4, 512);
  const GenerationResult chunked = run_on(file, mesh, options, DataType::FLOAT32, requests, 4, 16);
  double worst = 1.0;
  for (size_t i = 0; i < requests.size(); ++i)
    worst = std::min(worst, pcc(whole.outputs[i].logits, chunked.outputs[i].logits));
  EXPECT_TRUE(all_ranks_ok(worst >= 0.99999 && tokens_of(whole) == tokens_of(chunked))) << "min PCC " << worst;
}

// KV-cache consistency, directly: every token's logits from decoding (the prompt prefilled, then
// one step per token through the cache) against meshnn's own prefill of the whole sequence so far
// (the prompt and the tokens generated before it) in one pass. The ragged prompts (33, 1, 45 and
// 31 tokens) put the decode steps across the tile boundaries at positions 32 and 48. Float32
// weights and activations: the two paths differ in summation order only.
TEST(Llama, DecodingThroughTheCacheMatchesPrefillingTheWholeSequence) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto requests = ragged_requests(config.vocab_size, 4);
  const LlamaOptions options{DataType::FLOAT32, DataType::FLOAT32};
  for (MeshShape ms : mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    const GenerationResult decoded = run_on(file, mesh, options, DataType::FLOAT32, requests, 4, 512);
    // Request (i, t): request i's prompt and its first t generated tokens, for one token.
    std::vector<GenerationRequest> whole;
    for (size_t i = 0; i < requests.size(); ++i)
      for (size_t t = 0; t < decoded.outputs[i].tokens.size(); ++t) {
        GenerationRequest r = requests[i];
        r.id = 100 * i + t;
        r.prompt.insert(r.prompt.end(), decoded.outputs[i].tokens.begin(), decoded.outputs[i].tokens.begin() + t);
        r.max_new_tokens = 1;
        whole.push_back(std::move(r));
      }
    const GenerationResult prefilled =
        run_on(file, mesh, options, DataType::FLOAT32, whole, static_cast<int64_t>(whole.size()), 512);
    const size_t vocab = static_cast<size_t>(config.vocab_size);
    double worst = 1.0;
    bool same_tokens = true;
    size_t k = 0;
    for (size_t i = 0; i < requests.size(); ++i)
      for (size_t t = 0; t < decoded.outputs[i].tokens.size(); ++t, ++k) {
        const std::vector<float>& all = decoded.outputs[i].logits;
        const std::vector<float> step(all.begin() + t * vocab, all.begin() + (t + 1) * vocab);
        worst = std::min(worst, pcc(step, prefilled.outputs[k].logits));
        same_tokens = same_tokens && prefilled.outputs[k].tokens.front() == decoded.outputs[i].tokens[t];
      }
    EXPECT_TRUE(all_ranks_ok(k == whole.size() && worst >= 0.99999 && same_tokens))
        << ms.to_string() << ": min PCC " << worst << " over " << k << " tokens, same greedy tokens " << same_tokens;
  }
}

// Prefill's row-parallel projections planned by distributed::matmul (LlamaOptions::planned_prefill)
// against the hand-placed matmul + all_reduce, in tp and 2d on every mesh shape: the planner finds
// the same local products and the same reductions, so where every reduction has at most two members
// (a + b = b + a) the logits are the same bits; beyond, the ring sums in another order and the
// logits agree to float32 rounding. Both also against float64.
TEST(Llama, PlannedPrefillGivesTheHandPlacedLogits) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto requests = ragged_requests(config.vocab_size, 4);
  for (MeshShape ms : mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (LlamaSharding sharding : {LlamaSharding::TENSOR_PARALLEL, LlamaSharding::TWO_D}) {
      LlamaOptions options{DataType::FLOAT32, DataType::FLOAT32};
      options.sharding = sharding;
      options.planned_prefill = false;
      const GenerationResult hand = run_on(file, mesh, options, DataType::FLOAT32, requests, 4, 512);
      options.planned_prefill = true;
      const GenerationResult planned = run_on(file, mesh, options, DataType::FLOAT32, requests, 4, 512);
      const int widest_reduction = sharding == LlamaSharding::TWO_D ? std::max(ms.rows, ms.cols) : ms.rows * ms.cols;
      bool same_bits = true;
      double worst = 1.0;
      for (size_t i = 0; i < requests.size(); ++i) {
        same_bits = same_bits && hand.outputs[i].logits == planned.outputs[i].logits;
        worst = std::min(worst, pcc(hand.outputs[i].logits, planned.outputs[i].logits));
      }
      const double vs_float64 = min_pcc_vs_reference(file, requests, planned, config.vocab_size);
      const bool ok = (widest_reduction <= 2 ? same_bits : worst >= 0.99999) && vs_float64 >= 0.9999 &&
                      tokens_of(hand) == tokens_of(planned);
      EXPECT_TRUE(all_ranks_ok(ok)) << ms.to_string() << (sharding == LlamaSharding::TWO_D ? " 2d" : " tp")
                                    << ": same bits " << same_bits << ", min PCC vs hand-placed " << worst
                                    << ", vs float64 " << vs_float64;
    }
  }
}

// More requests than slots, finishing at different steps: each request's tokens are those of its
// solo run, and its logits agree to float32 rounding.
TEST(Llama, ContinuousBatchingEqualsSoloRuns) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  std::vector<GenerationRequest> requests = ragged_requests(config.vocab_size, 3);
  const auto more = ragged_requests(config.vocab_size, 7);
  for (size_t i = 0; i < more.size(); ++i) {
    GenerationRequest r = more[i];
    r.id = 10 + i;
    r.max_new_tokens = 2 + 3 * static_cast<int64_t>(i);
    requests.push_back(r);
  }
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaOptions options{DataType::FLOAT32, DataType::FLOAT32};
  const GenerationResult batched = run_on(file, mesh, options, DataType::FLOAT32, requests, 3, 512);
  bool same = true;
  double worst = 1.0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationResult solo = run_on(file, mesh, options, DataType::FLOAT32, std::span(&requests[i], 1), 1, 512);
    same = same && solo.outputs[0].tokens == batched.outputs[i].tokens;
    worst = std::min(worst, pcc(solo.outputs[0].logits, batched.outputs[i].logits));
  }
  EXPECT_TRUE(all_ranks_ok(same && worst >= 0.99999)) << "tokens equal: " << same << ", min PCC " << worst;
}

// Speculative decoding by prompt lookup (GenerationOptions::draft_tokens): every request makes the
// tokens it makes without drafts, greedy ones in fewer decode steps (the tiny model's greedy
// answers repeat themselves, so drafts are found and kept); every token reaches on_token once, in
// order; requests that sample, or ask for log-probabilities, are decoded as before beside them.
TEST(Llama, PromptLookupDraftsKeepEachRequestsTokens) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  auto requests = ragged_requests(config.vocab_size, 24);
  GenerationRequest repeating = requests[0];
  repeating.id = 9;
  repeating.prompt.clear();
  for (int k = 0; k < 6; ++k)
    for (int32_t t : {11, 42, 7, 99, 150}) repeating.prompt.push_back(t);
  requests.push_back(repeating);
  requests[1].sampling = serving::SamplingParams{serving::SamplingMode::TOP_P, 0.9, 0, 0.8, 5};
  requests[3].logprobs = 2;
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(3, 96, DataType::FLOAT32);  // 3 slots: requests wait and join
  GenerationOptions go;
  const GenerationResult plain = serving::generate(model, cache, requests, go);
  go.draft_tokens = 4;
  std::vector<std::vector<int32_t>> reported(requests.size());
  go.on_token = [&](size_t r, int32_t token, bool, const serving::TokenLogprobs*) { reported[r].push_back(token); };
  const GenerationResult drafted = serving::generate(model, cache, requests, go);

  bool same = true;
  for (size_t i = 0; i < requests.size(); ++i)
    same = same && drafted.outputs[i].tokens == plain.outputs[i].tokens && reported[i] == plain.outputs[i].tokens &&
           drafted.outputs[i].logprobs.size() == plain.outputs[i].logprobs.size();
  const serving::GenerationStats& s = drafted.stats;
  const int64_t steps_before = plain.stats.decode_steps + plain.stats.prefill_passes;
  const int64_t steps_after = s.decode_steps + s.prefill_passes;
  const bool sped = s.accepted_draft_tokens > 0 && s.accepted_draft_tokens <= s.drafted_tokens &&
                    steps_after < steps_before &&
                    s.decode_tokens + s.decode_tokens_in_prefill == plain.stats.decode_tokens + plain.stats.decode_tokens_in_prefill;
  EXPECT_TRUE(all_ranks_ok(same && sped))
      << "same tokens: " << same << "; " << s.accepted_draft_tokens << " of " << s.drafted_tokens
      << " drafts kept, passes " << steps_after << " against " << steps_before;
}

// A request ends at the first of the stop ids it produces (the id included) and its slot goes to
// the next request; every token reaches on_token in order, the last one marked.
TEST(Llama, StopTokensEndRequestsAndEveryTokenIsReported) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto requests = ragged_requests(config.vocab_size, 6);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::BFLOAT8_B, DataType::BFLOAT16});
  serving::KvCache cache = model.make_cache(2, 64, DataType::BFLOAT16);
  const GenerationResult free_run = serving::generate(model, cache, requests, GenerationOptions{});

  GenerationOptions go;
  go.stop_token_ids = {free_run.outputs[0].tokens[2], free_run.outputs[2].tokens[1]};
  std::vector<std::vector<int32_t>> reported(requests.size());
  std::vector<int> last_marks(requests.size(), 0);
  bool marked_at_end = true;
  go.on_token = [&](size_t request, int32_t token, bool last, const serving::TokenLogprobs*) {
    reported[request].push_back(token);
    last_marks[request] += last ? 1 : 0;
    marked_at_end = marked_at_end && (last_marks[request] == 0 || last);
  };
  const GenerationResult stopped = serving::generate(model, cache, requests, go);
  bool ok = marked_at_end;
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<int32_t> expected;
    for (int32_t t : free_run.outputs[i].tokens) {
      expected.push_back(t);
      if (std::find(go.stop_token_ids.begin(), go.stop_token_ids.end(), t) != go.stop_token_ids.end()) break;
    }
    ok = ok && stopped.outputs[i].tokens == expected && reported[i] == expected && last_marks[i] == 1;
  }
  EXPECT_LE(stopped.outputs[0].tokens.size(), 3u);
  EXPECT_LE(stopped.outputs[2].tokens.size(), 2u);
  EXPECT_TRUE(all_ranks_ok(ok));
}

// A request's own stop tokens (stop_token_ids), ignore_eos and min_new_tokens beside requests
// that stop at the options' eos: each ends at the first of its stop tokens, as the free run makes
// them; before min_new_tokens its stop tokens are never drawn (each token is the argmax of its raw
// logits with them at -inf), and it may stop after.
TEST(Llama, RequestsStopAtTheirOwnTokensAndNotBeforeMinTokens) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  auto requests = ragged_requests(config.vocab_size, 10);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(2, 64, DataType::FLOAT32);
  const GenerationResult free_run = serving::generate(model, cache, requests, GenerationOptions{});
  auto tokens = [&](size_t i) { return free_run.outputs[i].tokens; };
  // Up to and with the first of `stops` in the free run's tokens of request i.
  auto until = [&](size_t i, const std::vector<int32_t>& stops) {
    std::vector<int32_t> kept;
    for (int32_t t : tokens(i)) {
      kept.push_back(t);
      if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
    }
    return kept;
  };

  GenerationOptions go;
  go.stop_token_ids = {tokens(1)[2]};  // the "eos"
  go.keep_logits = true;
  requests[0].stop_token_ids = {tokens(0)[3]};
  requests[0].ignore_eos = true;
  requests[1].ignore_eos = true;
  const int32_t early = tokens(2)[1];
  requests[2].stop_token_ids = {early};
  requests[2].min_new_tokens = 6;
  const GenerationResult run = serving::generate(model, cache, requests, go);

  const bool own = run.outputs[0].tokens == until(0, {tokens(0)[3]}) && run.outputs[1].tokens == tokens(1) &&
                   run.outputs[3].tokens == until(3, go.stop_token_ids);
  // Request 2: argmax of its raw logits without its stop tokens (its own and the eos) until 6 tokens.
  const serving::RequestOutput& out = run.outputs[2];
  const auto vocab = static_cast<size_t>(config.vocab_size);
  bool held_back = out.tokens.size() >= 6;
  for (size_t t = 0; t < out.tokens.size() && held_back; ++t) {
    std::vector<float> row(out.logits.begin() + static_cast<int64_t>(t * vocab),
                           out.logits.begin() + static_cast<int64_t>((t + 1) * vocab));
    if (t < 6) row[static_cast<size_t>(early)] = row[static_cast<size_t>(go.stop_token_ids[0])] = -INFINITY;
    const int32_t best = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    held_back = out.tokens[t] == best;
    const bool stop = out.tokens[t] == early || out.tokens[t] == go.stop_token_ids[0];
    held_back = held_back && (t < 6 ? !stop : !stop || t + 1 == out.tokens.size());  // after 6: a stop ends it
  }
  EXPECT_TRUE(all_ranks_ok(own && held_back))
      << "own stop tokens and ignore_eos: " << own << ", min_new_tokens holds them back: " << held_back;

  GenerationRequest bad = requests[0];
  bad.min_new_tokens = bad.max_new_tokens + 1;
  EXPECT_THROW(serving::generate(model, cache, std::span(&bad, 1), go), Error);
  bad = requests[0];
  bad.stop_token_ids = {static_cast<int32_t>(config.vocab_size)};
  EXPECT_THROW(serving::generate(model, cache, std::span(&bad, 1), go), Error);
}

// A conversation's next turn whose prompt begins with the last turn's prompt and answer takes
// those tokens from the cache slot the last turn left them in (cached_prefix, cached_slot), even
// while another request is admitted beside it: its tokens are those of the whole prompt
// prefilled afresh, its logits agree to float32 rounding, and it prefills only the rest. Offsets
// that leave no prompt token to prefill, or name no slot, are refused.
TEST(Llama, NextTurnTakesItsPrefixFromTheCache) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto first_turns = ragged_requests(config.vocab_size, 5);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  GenerationOptions go;
  go.keep_logits = true;
  serving::KvCache cache = model.make_cache(2, 128, DataType::FLOAT32);
  // Requests 0 and 2 of the ragged set: 0 into slot 0, 2 into slot 1.
  const std::vector<GenerationRequest> turn1 = {first_turns[0], first_turns[2]};
  const GenerationResult answered = serving::generate(model, cache, turn1, go);

  // Request 2's next turn names slot 1, and comes first: a plain request would be handed slot 0.
  GenerationRequest next = turn1[1];
  next.id = 7;
  next.prompt.insert(next.prompt.end(), answered.outputs[1].tokens.begin(), answered.outputs[1].tokens.end());
  for (int32_t t : {3, 1, 4, 1, 5}) next.prompt.push_back(t % static_cast<int32_t>(config.vocab_size));
  next.cached_prefix = static_cast<int64_t>(turn1[1].prompt.size() + answered.outputs[1].tokens.size() - 1);
  next.cached_slot = 1;
  GenerationRequest other = first_turns[3];
  other.id = 8;
  const std::vector<GenerationRequest> turn2 = {next, other};
  const GenerationResult reused = serving::generate(model, cache, turn2, go);

  GenerationRequest fresh_next = next;
  fresh_next.cached_prefix = 0;
  const std::vector<GenerationRequest> fresh_turn2 = {fresh_next, other};
  serving::KvCache fresh_cache = model.make_cache(2, 128, DataType::FLOAT32);
  const GenerationResult fresh = serving::generate(model, fresh_cache, fresh_turn2, go);
  const bool same_tokens = reused.outputs[0].tokens == fresh.outputs[0].tokens &&
                           reused.outputs[1].tokens == fresh.outputs[1].tokens;
  const double worst = std::min(pcc(reused.outputs[0].logits, fresh.outputs[0].logits),
                                pcc(reused.outputs[1].logits, fresh.outputs[1].logits));
  const int64_t prefilled = reused.stats.prefill_tokens;
  const int64_t expected_prefill =
      static_cast<int64_t>(other.prompt.size() + next.prompt.size()) - next.cached_prefix;
  EXPECT_TRUE(all_ranks_ok(same_tokens && worst >= 0.99999 && prefilled == expected_prefill))
      << "tokens equal: " << same_tokens << ", min PCC " << worst << ", prefilled " << prefilled << " of "
      << expected_prefill;

  GenerationRequest whole = next;
  whole.cached_prefix = static_cast<int64_t>(whole.prompt.size());
  EXPECT_THROW(serving::generate(model, cache, std::span(&whole, 1), go), Error);
  GenerationRequest nowhere = next;
  nowhere.cached_slot = 2;
  EXPECT_THROW(serving::generate(model, cache, std::span(&nowhere, 1), go), Error);
}

// A server's generator (serving::Generator): requests submitted while others run, each with its
// own sampling (rows of different parameters share passes, sampled in groups), make exactly the
// tokens they make alone with those parameters as the options'. A cancelled request stops with a
// prefix of its tokens, and its slot goes to the waiting request at the next pass.
TEST(Llama, RequestsJoiningARunningGeneratorMakeTheirSoloTokens) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  auto requests = ragged_requests(config.vocab_size, 8);  // 4 requests
  requests[1].sampling = serving::SamplingParams{serving::SamplingMode::TOP_P, 0.9, 0, 0.8, 5};
  requests[3].sampling = serving::SamplingParams{serving::SamplingMode::TOP_K, 1.3, 5, 0.9, 9};
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::BFLOAT8_B, DataType::BFLOAT16});
  serving::KvCache cache = model.make_cache(3, 64, DataType::BFLOAT16);
  std::vector<std::vector<int32_t>> solo(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationOptions alone;
    GenerationRequest r = requests[i];
    if (r.sampling) alone.sampling = *r.sampling;
    r.sampling.reset();
    solo[i] = serving::generate(model, cache, std::span(&r, 1), alone).outputs[0].tokens;
  }

  std::vector<std::vector<int32_t>> streamed(requests.size()), finished(requests.size());
  std::vector<int> finishes(requests.size(), 0);
  std::vector<uint8_t> cancelled(requests.size(), 0);
  GenerationOptions go;
  go.on_token = [&](size_t handle, int32_t token, bool, const serving::TokenLogprobs*) { streamed[handle].push_back(token); };
  serving::Generator generator(model, cache, go, [&](size_t handle, serving::RequestOutput&& out) {
    finished[handle] = std::move(out.tokens);
    cancelled[handle] = out.cancelled ? 1 : 0;
    ++finishes[handle];
  });
  EXPECT_TRUE(generator.idle());
  EXPECT_EQ(generator.submit(requests[0]), 0u);
  generator.step();
  generator.step();
  EXPECT_EQ(generator.submit(requests[1]), 1u);
  EXPECT_EQ(generator.submit(requests[2]), 2u);
  EXPECT_EQ(generator.submit(requests[3]), 3u);  // waits: 3 slots
  generator.step();
  generator.step();
  const bool cut_short = streamed[2].size() == 2 && streamed[3].empty();
  generator.cancel(2);
  generator.step();  // request 3 takes the freed slot and prefills at once
  const bool admitted = streamed[3].size() == 1;
  while (!generator.idle()) generator.step();
  generator.cancel(2);  // finished: ignored
  bool same = true;
  for (size_t i : {0, 1, 3}) same = same && finished[i] == solo[i] && streamed[i] == solo[i];
  const bool prefix = finished[2] == std::vector<int32_t>(solo[2].begin(), solo[2].begin() + 2);
  const bool once = std::all_of(finishes.begin(), finishes.end(), [](int n) { return n == 1; }) &&
                    cancelled == std::vector<uint8_t>{0, 0, 1, 0};
  EXPECT_TRUE(all_ranks_ok(same && cut_short && admitted && prefix && once))
      << "solo tokens: " << same << ", request 2 cut after 2 tokens: " << cut_short << " (prefix " << prefix
      << "), request 3 admitted at the next pass: " << admitted << ", one finish each, only request 2's cancelled: "
      << once;

  GenerationRequest too_long = requests[0];
  too_long.max_new_tokens = 64;
  EXPECT_THROW(generator.check(too_long, "the request"), Error);
  GenerationRequest bad_sampling = requests[0];
  bad_sampling.sampling = serving::SamplingParams{serving::SamplingMode::TOP_P, 1.0, 0, 1.5, 0};
  EXPECT_THROW(generator.check(bad_sampling, "the request"), Error);
}

// Log-probabilities (GenerationRequest::logprobs): with the vocabulary sharded over the ranks,
// each token's is the log-softmax of its position's full logits (kept with keep_logits and
// recomputed here in long double), its alternatives are the most likely ids in order, requests
// without them get none, the tokens are those of a run without any, and on_token reports each
// as it is made. Without keep_logits the same values come out.
TEST(Llama, LogprobsAreTheLogSoftmaxOfEachTokensLogits) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  auto requests = ragged_requests(config.vocab_size, 5);
  requests[3].sampling = serving::SamplingParams{serving::SamplingMode::TOP_P, 0.9, 0, 0.8, 5};
  const auto plain = requests;
  requests[0].logprobs = 4;
  requests[2].logprobs = 0;
  requests[3].logprobs = 20;
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(2, 64, DataType::FLOAT32);  // 2 slots: requests wait and join
  GenerationOptions go;
  go.keep_logits = true;
  std::vector<std::vector<serving::TokenLogprobs>> streamed(requests.size());
  go.on_token = [&](size_t r, int32_t, bool, const serving::TokenLogprobs* lp) {
    if (lp != nullptr) streamed[r].push_back(*lp);
  };
  const GenerationResult with = serving::generate(model, cache, requests, go);

  double worst = 0;  // the largest error of a log-probability against the long double reference
  bool shapes = true, order = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    const serving::RequestOutput& out = with.outputs[i];
    const int64_t top = requests[i].logprobs;
    if (top < 0) {
      shapes = shapes && out.logprobs.empty() && streamed[i].empty();
      continue;
    }
    shapes = shapes && out.logprobs.size() == out.tokens.size() && streamed[i].size() == out.tokens.size();
    for (size_t t = 0; t < out.tokens.size() && shapes; ++t) {
      const float* row = out.logits.data() + t * static_cast<size_t>(config.vocab_size);
      long double most = row[0], sum = 0;
      for (int64_t v = 1; v < config.vocab_size; ++v) most = std::max<long double>(most, row[v]);
      for (int64_t v = 0; v < config.vocab_size; ++v) sum += std::exp(static_cast<long double>(row[v]) - most);
      const long double log_total = most + std::log(sum);
      const serving::TokenLogprobs& lp = out.logprobs[t];
      worst = std::max(worst, static_cast<double>(std::fabs(lp.logprob - (row[out.tokens[t]] - log_total))));
      shapes = shapes && static_cast<int64_t>(lp.top.size()) == top && streamed[i][t].logprob == lp.logprob &&
               streamed[i][t].top == lp.top;
      // The alternatives: no id outside them is likelier than the last, and they come in order.
      std::vector<int32_t> ids;
      for (const auto& [id, logprob] : lp.top) {
        ids.push_back(id);
        worst = std::max(worst, static_cast<double>(std::fabs(logprob - (row[id] - log_total))));
      }
      for (size_t k = 1; k < ids.size(); ++k)
        order = order && (row[ids[k - 1]] > row[ids[k]] || (row[ids[k - 1]] == row[ids[k]] && ids[k - 1] < ids[k]));
      if (!ids.empty())
        for (int64_t v = 0; v < config.vocab_size; ++v)
          order = order && (std::find(ids.begin(), ids.end(), v) != ids.end() || row[v] <= row[ids.back()]);
    }
  }
  go.on_token = nullptr;
  go.keep_logits = false;
  const GenerationResult without_logits = serving::generate(model, cache, requests, go);
  const GenerationResult none = serving::generate(model, cache, plain, go);
  bool same = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    same = same && with.outputs[i].tokens == none.outputs[i].tokens &&
           without_logits.outputs[i].tokens == none.outputs[i].tokens;
    for (size_t t = 0; t < with.outputs[i].logprobs.size() && same; ++t)
      same = without_logits.outputs[i].logprobs.size() == with.outputs[i].logprobs.size() &&
             without_logits.outputs[i].logprobs[t].logprob == with.outputs[i].logprobs[t].logprob &&
             without_logits.outputs[i].logprobs[t].top == with.outputs[i].logprobs[t].top;
  }
  // float32 rounding of values of magnitude about log(vocab): a few ulps.
  EXPECT_TRUE(all_ranks_ok(shapes && order && same && worst <= 1e-5))
      << "shapes: " << shapes << ", alternatives in order: " << order << ", same tokens and values without logprobs "
      << "or keep_logits: " << same << ", largest error " << worst;

  GenerationRequest too_many = requests[0];
  too_many.logprobs = config.vocab_size + 1;
  EXPECT_THROW(serving::generate(model, cache, std::span(&too_many, 1), go), Error);
}

// This test's own reading of logit_penalties.hpp's formula, over the whole vocabulary in float64:
// what one process makes of a row of raw logits for a request's prompt and tokens so far.
std::vector<float> penalised_row(std::span<const float> raw, const serving::LogitPenalties& p,
                                 std::span<const int32_t> prompt, std::span<const int32_t> made) {
  std::vector<float> out(raw.begin(), raw.end());
  for (size_t j = 0; j < raw.size(); ++j) {
    const auto id = static_cast<int32_t>(j);
    double x = raw[j];
    for (const auto& [b, value] : p.bias)
      if (b == id) x += value;
    const auto count = static_cast<double>(std::count(made.begin(), made.end(), id));
    const bool seen = count > 0 || std::find(prompt.begin(), prompt.end(), id) != prompt.end();
    if (seen) x = x > 0 ? x / p.repetition : x * p.repetition;
    x -= p.frequency * count + (count > 0 ? p.presence : 0.0);
    out[j] = static_cast<float>(x);
  }
  return out;
}

// Logit bias and penalties (serving/logit_penalties.hpp) change the logits the sampler sees, not
// those kept or reported: each token is the one sample_full draws from its raw logits adjusted by
// penalised_row for its request's prompt and tokens before it, greedy and top-p, with the
// vocabulary sharded over the mesh (the devices adjust their shards apart). A +100 bias forces its
// token; the penalties change some of the tokens a run without them makes; a request without any
// keeps its tokens.
TEST(Llama, PenaltiesAdjustTheLogitsTheSamplerSees) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  auto requests = ragged_requests(config.vocab_size, 12);
  requests[1].sampling = serving::SamplingParams{serving::SamplingMode::TOP_P, 0.8, 0, 0.9, 11};
  const auto plain = requests;
  requests[0].penalties = serving::LogitPenalties{0, 2.0, 1, {}};
  requests[1].penalties = serving::LogitPenalties{1.5, 0.5, 1.3, {{3, -100.0f}}};
  requests[2].penalties = serving::LogitPenalties{0, 0, 1, {{17, 100.0f}}};
  requests[3].penalties = serving::LogitPenalties{-1.0, 0, 0.5, {{config.vocab_size - 1, 7.5f}}};
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(2, 64, DataType::FLOAT32);
  GenerationOptions go;
  go.keep_logits = true;
  const GenerationResult with = serving::generate(model, cache, requests, go);

  bool drawn = true;  // every token is sample_full's on the adjusted raw logits
  const auto vocab = static_cast<size_t>(config.vocab_size);
  for (size_t i = 0; i < requests.size(); ++i) {
    const serving::RequestOutput& out = with.outputs[i];
    const serving::SamplingParams params = requests[i].sampling.value_or(go.sampling);
    for (size_t t = 0; t < out.tokens.size(); ++t) {
      const std::vector<float> row = penalised_row(std::span(out.logits).subspan(t * vocab, vocab),
                                                   *requests[i].penalties, requests[i].prompt,
                                                   std::span(out.tokens).first(t));
      const serving::SampleRow at{requests[i].id, static_cast<int64_t>(t)};
      drawn = drawn && serving::sample_full(row, config.vocab_size, std::span(&at, 1), params)[0] == out.tokens[t];
    }
  }
  const bool forced = std::all_of(with.outputs[2].tokens.begin(), with.outputs[2].tokens.end(),
                                  [](int32_t t) { return t == 17; });
  go.keep_logits = false;
  const GenerationResult none = serving::generate(model, cache, plain, go);
  size_t changed = 0;
  for (size_t i : {0, 1, 3}) changed += with.outputs[i].tokens != none.outputs[i].tokens ? 1 : 0;
  // The options' penalties apply to the requests without their own, as if each had them.
  auto own = plain, defaulted = plain;
  for (size_t i = 1; i < own.size(); ++i) own[i].penalties = requests[0].penalties;
  defaulted[0].penalties = serving::LogitPenalties{};  // neutral, its own: as without any
  const GenerationResult each_own = serving::generate(model, cache, own, go);
  go.penalties = *requests[0].penalties;
  const GenerationResult by_default = serving::generate(model, cache, defaulted, go);
  bool defaults = by_default.outputs[0].tokens == none.outputs[0].tokens;
  for (size_t i = 1; i < own.size(); ++i) defaults = defaults && by_default.outputs[i].tokens == each_own.outputs[i].tokens;
  EXPECT_TRUE(all_ranks_ok(drawn && forced && changed == 3 && defaults))
      << "drawn from the adjusted logits: " << drawn << ", +100 forces its token: " << forced << ", requests changed "
      << changed << " of 3, options' default: " << defaults;
}

// Prompt log-probabilities (GenerationRequest::prompt_logprobs, OpenAI's echo): each prompt token
// after the first gets the log-softmax, at that token, of the float64 reference's logits of the
// position before it, with its alternatives. The prompt is prefilled in chunks smaller than itself
// beside another request's decode rows, so some passes score prompt rows and sample none; the
// generated tokens are those of a run without it, and a slot's cached prefix is not used.
TEST(Llama, PromptLogprobsScoreEveryPromptTokenAgainstFloat64) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  auto requests = ragged_requests(config.vocab_size, 4);
  const auto plain = requests;
  requests[2].prompt_logprobs = true;  // 45 prompt tokens, in passes of at most 16 rows
  requests[2].logprobs = 3;
  requests[0].prompt_logprobs = true;  // no alternatives asked for: none given
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(2, 64, DataType::FLOAT32);
  GenerationOptions go;
  go.prefill_chunk = 16;
  go.reuse_prefixes = true;
  std::vector<size_t> reported(requests.size(), 0);
  go.on_prompt_logprobs = [&](size_t r, const std::vector<serving::TokenLogprobs>& lp) { reported[r] = lp.size(); };
  const GenerationResult with = serving::generate(model, cache, requests, go);
  const GenerationResult without = serving::generate(model, cache, plain, go);

  double worst = 0;
  bool shapes = true, order = true, same = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    same = same && with.outputs[i].tokens == without.outputs[i].tokens;
    const auto& scored = with.outputs[i].prompt_logprobs;
    if (!requests[i].prompt_logprobs) {
      shapes = shapes && scored.empty() && reported[i] == 0;
      continue;
    }
    const auto& prompt = requests[i].prompt;
    shapes = shapes && scored.size() == prompt.size() - 1 && reported[i] == scored.size();
    const auto reference = testing::llama_reference_logits(file, prompt);
    for (size_t t = 0; t < scored.size() && shapes; ++t) {
      const std::vector<double>& row = reference[t];
      long double most = row[0], sum = 0;
      for (double x : row) most = std::max<long double>(most, x);
      for (double x : row) sum += std::exp(static_cast<long double>(x) - most);
      const long double log_total = most + std::log(sum);
      worst = std::max(worst, static_cast<double>(std::fabs(scored[t].logprob - (row[prompt[t + 1]] - log_total))));
      shapes = shapes && static_cast<int64_t>(scored[t].top.size()) == std::max<int64_t>(requests[i].logprobs, 0);
      for (size_t k = 0; k < scored[t].top.size(); ++k) {
        const auto [id, logprob] = scored[t].top[k];
        worst = std::max(worst, static_cast<double>(std::fabs(logprob - (row[id] - log_total))));
        order = order && (k == 0 || scored[t].top[k - 1].second >= logprob);
      }
    }
  }
  // float32 weights and activations against float64: the logits' own error (PCC >= 0.99999 here).
  EXPECT_TRUE(all_ranks_ok(shapes && order && same && worst <= 2e-3))
      << "shapes: " << shapes << ", alternatives in order: " << order << ", same tokens: " << same
      << ", largest error against float64 " << worst;

  GenerationRequest cached = requests[2];
  cached.cached_prefix = 4;
  EXPECT_THROW(serving::generate(model, cache, std::span(&cached, 1), go), Error);
}

// reuse_prefixes (the server's): a request whose prompt begins with what an earlier request left in
// a free slot (its prompt and its tokens but the last) takes that slot and prefills only the rest,
// giving the tokens of a fresh prefill (logits to float32 rounding); a request that matches no slot
// takes the one idle longest, so the matching slot's cache survives until it is needed.
TEST(Llama, ReusedPrefixesGiveTheTokensOfAFreshPrefill) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto requests = ragged_requests(config.vocab_size, 6);  // prompts of 33, 1, 45 and 31 tokens
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  GenerationOptions go;
  go.keep_logits = true;
  auto fresh = [&](const GenerationRequest& r) {
    serving::KvCache fresh_cache = model.make_cache(1, 128, DataType::FLOAT32);
    return serving::generate(model, fresh_cache, std::span(&r, 1), go).outputs[0];
  };
  GenerationOptions reuse = go;
  reuse.reuse_prefixes = true;
  serving::KvCache cache = model.make_cache(2, 128, DataType::FLOAT32);
  std::vector<serving::RequestOutput> out(3);
  serving::Generator generator(model, cache, reuse,
                               [&](size_t handle, serving::RequestOutput&& o) { out[handle] = std::move(o); });
  generator.submit(requests[0]);  // into slot 0
  while (!generator.idle()) generator.step();
  // The conversation's next turn: request 0's prompt, its answer and 5 more tokens.
  GenerationRequest next = requests[0];
  next.id = 7;
  next.prompt.insert(next.prompt.end(), out[0].tokens.begin(), out[0].tokens.end());
  for (int32_t t : {3, 1, 4, 1, 5}) next.prompt.push_back(t % static_cast<int32_t>(config.vocab_size));
  generator.submit(requests[2]);  // first in line: matches nothing, so takes slot 1, idle longest
  generator.submit(next);
  while (!generator.idle()) generator.step();
  const int64_t held = static_cast<int64_t>(requests[0].prompt.size() + out[0].tokens.size() - 1);
  const serving::GenerationStats& s = generator.stats();
  const int64_t prompts = static_cast<int64_t>(requests[0].prompt.size() + requests[2].prompt.size() + next.prompt.size());
  const serving::RequestOutput other = fresh(requests[2]), again = fresh(next);
  const bool same = out[1].tokens == other.tokens && out[2].tokens == again.tokens;
  const double worst = std::min(pcc(out[1].logits, other.logits), pcc(out[2].logits, again.logits));
  EXPECT_TRUE(all_ranks_ok(same && worst >= 0.99999 && s.reused_prompt_tokens == held &&
                           s.prefill_tokens == prompts - held))
      << "tokens of fresh prefills: " << same << ", min PCC " << worst << ", reused " << s.reused_prompt_tokens
      << " of " << held << " held, prefilled " << s.prefill_tokens << " of " << prompts - held;
}

TEST(Llama, SameRunTwiceIsBitwiseIdentical) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto requests = ragged_requests(config.vocab_size, 4);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaOptions options{DataType::BFLOAT8_B, DataType::BFLOAT16};
  const GenerationResult a = run_on(file, mesh, options, DataType::BFLOAT16, requests, 2, 16);
  const GenerationResult b = run_on(file, mesh, options, DataType::BFLOAT16, requests, 2, 16);
  EXPECT_TRUE(all_ranks_ok(same_bits(a, b)));
}

// The warm-up pass fills cache rows with its dummy tokens' keys and values (bfloat8_b blocks
// included) and leaves the passes' buffers made: every later request's tokens and logits are the
// bits it gets without it.
TEST(Llama, WarmUpChangesNoBitOfTheRequests) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto requests = ragged_requests(config.vocab_size, 4);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaOptions options{DataType::BFLOAT8_B, DataType::BFLOAT16};
  const GenerationResult cold = run_on(file, mesh, options, DataType::BFLOAT8_B, requests, 2, 16);
  const GenerationResult warm = run_on(file, mesh, options, DataType::BFLOAT8_B, requests, 2, 16, true);
  EXPECT_TRUE(all_ranks_ok(same_bits(cold, warm)));
}

TEST(Llama, BadInputFailsAlikeOnEveryRank) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, {DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(2, 64, DataType::FLOAT32);
  auto message_for = [&](std::vector<GenerationRequest> requests) {
    return testing::error_message_of([&] { serving::generate(model, cache, requests, GenerationOptions{}); });
  };
  const std::string empty = message_for({GenerationRequest{0, {}, 3}});
  const std::string outside = message_for({GenerationRequest{0, {5, 250}, 3}});
  const std::string too_long = message_for({GenerationRequest{0, std::vector<int32_t>(60, 1), 10}});
  const std::string beyond_positions = message_for({GenerationRequest{0, std::vector<int32_t>(250, 1), 10}});
  EXPECT_TRUE(all_ranks_ok(empty.find("empty prompt") != std::string::npos)) << empty;
  EXPECT_TRUE(all_ranks_ok(outside.find("250, outside the vocabulary") != std::string::npos)) << outside;
  EXPECT_TRUE(all_ranks_ok(too_long.find("exceeds the KV cache") != std::string::npos)) << too_long;
  EXPECT_TRUE(all_ranks_ok(beyond_positions.find("max_position_embeddings 256") != std::string::npos))
      << beyond_positions;
  for (const std::string& m : {empty, outside, too_long, beyond_positions}) EXPECT_TRUE(testing::same_on_all_ranks(m));

  // Heads that cannot be split: 8 heads / 2 KV heads over 3 devices.
  LlamaConfig c = config;
  const std::string split = testing::error_message_of([&] { split_heads_over(c, 3); });
  EXPECT_TRUE(
      all_ranks_ok(split.find("cannot split 8 attention heads and 2 KV heads over 3 devices") != std::string::npos))
      << split;
}

}  // namespace
}  // namespace meshnn::models::llama
