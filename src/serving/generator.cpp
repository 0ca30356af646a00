#include "meshnn/serving/generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <deque>

#include "meshnn/core/error.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/distributed/distribute.hpp"

namespace meshnn::serving {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void validate(const CausalLm& model, const KvCache& cache, std::span<const GenerationRequest> requests,
              const GenerationOptions& options) {
  options.sampling.validate();
  MESHNN_CHECK(options.prefill_chunk >= 1, "prefill_chunk must be >= 1, got {}", options.prefill_chunk);
  const int64_t limit = std::min(cache.max_seq(), model.max_positions());
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    MESHNN_CHECK(!r.prompt.empty(), "request {} has an empty prompt", i);
    MESHNN_CHECK(r.max_new_tokens >= 1, "request {} asks for {} new tokens (need >= 1)", i, r.max_new_tokens);
    const int64_t length = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
    MESHNN_CHECK(length <= model.max_positions(),
                 "request {}: prompt of {} tokens + {} new tokens = {} exceeds max_position_embeddings {}", i,
                 r.prompt.size(), r.max_new_tokens, length, model.max_positions());
    MESHNN_CHECK(length <= limit,
                 "request {}: prompt of {} tokens + {} new tokens = {} exceeds the KV cache's {} positions", i,
                 r.prompt.size(), r.max_new_tokens, length, limit);
    MESHNN_CHECK(r.cached_prefix >= 0 && r.cached_prefix < static_cast<int64_t>(r.prompt.size()),
                 "request {}: cached_prefix {} must be in [0, {}) (the last prompt token is always prefilled)", i,
                 r.cached_prefix, r.prompt.size());
    MESHNN_CHECK(r.cached_prefix == 0 || (r.cached_slot >= 0 && r.cached_slot < cache.slots()),
                 "request {}: cached_slot {} is not a slot of the cache [0, {})", i, r.cached_slot, cache.slots());
    for (size_t t = 0; t < r.prompt.size(); ++t)
      MESHNN_CHECK(r.prompt[t] >= 0 && r.prompt[t] < model.vocab_size(),
                   "request {}: token {} of the prompt is {}, outside the vocabulary [0, {})", i, t, r.prompt[t],
                   model.vocab_size());
  }
}

// The full logits of the sampled rows, composed from the vocabulary shards (every device gets them).
std::vector<float> full_logits(const CausalLm& model, const Tensor& local) {
  const MeshDevicePtr& mesh = model.mesh();
  if (mesh->num_devices() == 1) return local.to_float();
  const Shape global{1, 1, local.shape()[2], model.vocab_size()};
  return full_tensor(MeshTensor(mesh, global, {Shard{3}, Shard{3}}, local)).to_float();
}

struct Active {
  size_t request;
  int64_t slot;
  int64_t next_position;  // where the last sampled token goes in the next decode step
};

}  // namespace

GenerationResult generate(const CausalLm& model, KvCache& cache, std::span<const GenerationRequest> requests,
                          const GenerationOptions& options) {
  validate(model, cache, requests, options);
  GenerationResult result;
  result.outputs.resize(requests.size());
  GenerationStats& stats = result.stats;
  const int64_t vocab = model.vocab_size();
  std::vector<Clock::time_point> admitted(requests.size());

  std::deque<size_t> waiting;
  for (size_t i = 0; i < requests.size(); ++i) waiting.push_back(i);
  std::vector<int64_t> free_slots;
  for (int64_t s = cache.slots() - 1; s >= 0; --s) free_slots.push_back(s);  // slot 0 handed out first
  // What a pass uses is made once and reused (cleared, not freed), so that a decode step after
  // the first allocates nothing: the model's buffers, the sampler's, and these.
  std::vector<Active> active, still;
  active.reserve(static_cast<size_t>(cache.slots()));
  still.reserve(static_cast<size_t>(cache.slots()));
  TokenBatch batch;
  std::vector<SampleRow> sample_rows;
  std::vector<uint8_t> ended;  // per logit row of the pass: its request ended
  ShardedSampler sampler;
  sampler.reserve_rows(cache.slots());

  // Appends the sampled tokens (and logits) of `rows` of a pass and sets `ended`.
  auto record = [&](const Tensor& logits, std::span<const size_t> request_of_row) {
    sample_rows.clear();
    for (size_t r : request_of_row)
      sample_rows.push_back({requests[r].id, static_cast<int64_t>(result.outputs[r].tokens.size())});
    const auto sample_start = Clock::now();
    const std::span<const int32_t> next =
        sampler.sample(logits, model.vocab_shard(), sample_rows, options.sampling, model.mesh());
    std::vector<float> full;  // --save-logits gathers every pass's logits: that path allocates
    if (options.keep_logits) full = full_logits(model, logits);
    stats.sampling_seconds += seconds_since(sample_start);
    ended.assign(request_of_row.size(), 0);
    for (size_t i = 0; i < request_of_row.size(); ++i) {
      RequestOutput& out = result.outputs[request_of_row[i]];
      if (out.tokens.empty()) out.time_to_first_token = seconds_since(admitted[request_of_row[i]]);
      out.tokens.push_back(next[i]);
      if (options.keep_logits)
        out.logits.insert(out.logits.end(), full.begin() + i * vocab, full.begin() + (i + 1) * vocab);
      ended[i] = static_cast<int64_t>(out.tokens.size()) >= requests[request_of_row[i]].max_new_tokens ||
                 std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(), next[i]) !=
                     options.stop_token_ids.end();
      if (options.on_token) options.on_token(request_of_row[i], next[i], ended[i] != 0);
    }
  };

  // Requests holding a slot whose prompt is not yet wholly in the cache.
  struct Prefilling {
    size_t request;
    int64_t slot, done = 0;
  };
  std::deque<Prefilling> prefilling;
  std::vector<size_t> request_of_row;
  while (!waiting.empty() || !active.empty() || !prefilling.empty()) {
    // Admission: every free slot takes the next waiting request; one whose prompt begins in a
    // slot's cache takes that slot, and waits for it.
    while (!free_slots.empty() && !waiting.empty()) {
      const GenerationRequest& r = requests[waiting.front()];
      auto slot = free_slots.end() - 1;
      if (r.cached_prefix > 0) {
        slot = std::find(free_slots.begin(), free_slots.end(), r.cached_slot);
        if (slot == free_slots.end()) break;
      }
      RequestOutput& out = result.outputs[waiting.front()];
      out.tokens.reserve(static_cast<size_t>(r.max_new_tokens));
      if (options.keep_logits) out.logits.reserve(static_cast<size_t>(r.max_new_tokens * vocab));
      prefilling.push_back({waiting.front(), *slot, r.cached_prefix});
      admitted[waiting.front()] = Clock::now();
      waiting.pop_front();
      free_slots.erase(slot);
    }
    // One pass: a decode row for every active request, then as much of the waiting prompts as the
    // prefill budget allows (a long prompt spans several passes). Every pass reads all the weights
    // once, so prompts ride along with the decode step instead of costing passes of their own.
    batch.clear();
    request_of_row.clear();
    for (const Active& a : active) {
      batch.tokens.push_back(result.outputs[a.request].tokens.back());
      batch.slots.push_back(a.slot);
      batch.positions.push_back(a.next_position);
      batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
      request_of_row.push_back(a.request);
    }
    const size_t decode_rows = active.size();
    size_t prompts_completed = 0;
    for (Prefilling& p : prefilling) {
      const int64_t budget = options.prefill_chunk - static_cast<int64_t>(batch.tokens.size() - decode_rows);
      if (budget <= 0) break;
      const std::vector<int32_t>& prompt = requests[p.request].prompt;
      const int64_t length = static_cast<int64_t>(prompt.size()), end = std::min(length, p.done + budget);
      for (int64_t pos = p.done; pos < end; ++pos) {
        batch.tokens.push_back(prompt[static_cast<size_t>(pos)]);
        batch.slots.push_back(p.slot);
        batch.positions.push_back(pos);
      }
      stats.prefill_tokens += end - p.done;
      p.done = end;
      if (end < length) break;
      batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
      request_of_row.push_back(p.request);
      ++prompts_completed;
    }
    const bool decode_only = batch.tokens.size() == decode_rows;
    const auto pass_start = Clock::now();
    // The pass as a phase of the trace: the forward pass and the sampling of its rows.
    trace::Scope phase("phase", decode_only ? "decode step" : "prefill pass");
    if (phase.active())
      phase.describe(fmt::format(R"("step":{},"decode_rows":{},"prompt_rows":{})",
                                 decode_only ? stats.decode_steps : stats.prefill_passes, decode_rows,
                                 batch.tokens.size() - decode_rows));
    const Tensor& logits = model.forward(batch, cache, decode_only ? stats.decode_times : stats.prefill_times);
    ended.clear();
    if (!request_of_row.empty()) record(logits, request_of_row);
    phase.finish();
    (decode_only ? stats.decode_seconds : stats.prefill_seconds) += seconds_since(pass_start);
    if (decode_only) {
      ++stats.decode_steps;
      stats.decode_tokens += static_cast<int64_t>(decode_rows);
    } else {
      ++stats.prefill_passes;
      stats.decode_tokens_in_prefill += static_cast<int64_t>(decode_rows);
    }

    still.clear();
    for (size_t i = 0; i < decode_rows; ++i) {
      if (ended[i]) {
        free_slots.push_back(active[i].slot);
      } else {
        still.push_back(active[i]);
        ++still.back().next_position;
      }
    }
    for (size_t k = 0; k < prompts_completed; ++k) {
      const Prefilling& p = prefilling.front();
      if (ended[decode_rows + k])
        free_slots.push_back(p.slot);
      else
        still.push_back({p.request, p.slot, static_cast<int64_t>(requests[p.request].prompt.size())});
      prefilling.pop_front();
    }
    active.swap(still);
  }
  return result;
}

double warm_up(const CausalLm& model, KvCache& cache, int64_t prompt_rows, int64_t decode_rows) {
  const auto start = Clock::now();
  trace::Scope phase("phase", "warm-up");
  const int64_t slots = cache.slots(), positions = cache.max_seq();
  PhaseTimes ignored;
  TokenBatch batch;
  for (int64_t row = 0; row < std::min(prompt_rows, slots * positions); ++row) {
    batch.tokens.push_back(0);
    batch.slots.push_back(row / positions);
    batch.positions.push_back(row % positions);
  }
  if (!batch.tokens.empty()) {
    batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
    model.forward(batch, cache, ignored);
  }
  batch = {};
  for (int64_t slot = 0; slot < std::min(decode_rows, slots); ++slot) {
    batch.tokens.push_back(0);
    batch.slots.push_back(slot);
    batch.positions.push_back(0);
    batch.logit_rows.push_back(slot);
  }
  if (!batch.tokens.empty()) model.forward(batch, cache, ignored);
  return seconds_since(start);
}

}  // namespace meshnn::serving
