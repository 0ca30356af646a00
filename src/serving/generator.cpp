#include "meshnn/serving/generator.hpp"

#include <algorithm>
#include <chrono>
#include <deque>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/distribute.hpp"

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
    MESHNN_CHECK(length <= limit, "request {}: prompt of {} tokens + {} new tokens = {} exceeds the KV cache's {} positions",
                 i, r.prompt.size(), r.max_new_tokens, length, limit);
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
  std::vector<Active> active;
  TokenBatch batch;
  std::vector<SampleRow> sample_rows;

  // Appends the sampled tokens (and logits) of `rows` of a pass; returns which rows ended.
  auto record = [&](const Tensor& logits, std::span<const size_t> request_of_row) {
    sample_rows.clear();
    for (size_t r : request_of_row)
      sample_rows.push_back({requests[r].id, static_cast<int64_t>(result.outputs[r].tokens.size())});
    const auto sample_start = Clock::now();
    const std::vector<int32_t> next = sample_sharded(logits, model.vocab_shard(), sample_rows, options.sampling, model.mesh());
    std::vector<float> full;
    if (options.keep_logits) full = full_logits(model, logits);
    stats.sampling_seconds += seconds_since(sample_start);
    std::vector<bool> ended(request_of_row.size());
    for (size_t i = 0; i < request_of_row.size(); ++i) {
      RequestOutput& out = result.outputs[request_of_row[i]];
      if (out.tokens.empty()) out.time_to_first_token = seconds_since(admitted[request_of_row[i]]);
      out.tokens.push_back(next[i]);
      if (options.keep_logits) out.logits.insert(out.logits.end(), full.begin() + i * vocab, full.begin() + (i + 1) * vocab);
      ended[i] = static_cast<int64_t>(out.tokens.size()) >= requests[request_of_row[i]].max_new_tokens ||
                 (options.eos_token_id && next[i] == *options.eos_token_id);
    }
    return ended;
  };

  while (!waiting.empty() || !active.empty()) {
    // Admission: every free slot takes the next waiting request. Their prompts are prefilled
    // together, packed into passes of at most prefill_chunk tokens (a long prompt spans several
    // passes): every pass reads all the weights once, so short prompts should share one.
    struct Admitted {
      size_t request;
      int64_t slot, done = 0;
    };
    std::vector<Admitted> admitting;
    while (!free_slots.empty() && !waiting.empty()) {
      admitting.push_back({waiting.front(), free_slots.back()});
      admitted[waiting.front()] = Clock::now();
      waiting.pop_front();
      free_slots.pop_back();
    }
    for (size_t next = 0; next < admitting.size();) {
      batch.clear();
      std::vector<size_t> finishing;  // requests whose last prompt token is in this pass
      for (size_t i = next; i < admitting.size() && static_cast<int64_t>(batch.tokens.size()) < options.prefill_chunk; ++i) {
        Admitted& a = admitting[i];
        const std::vector<int32_t>& prompt = requests[a.request].prompt;
        const int64_t length = static_cast<int64_t>(prompt.size());
        const int64_t end = std::min(length, a.done + options.prefill_chunk - static_cast<int64_t>(batch.tokens.size()));
        for (int64_t p = a.done; p < end; ++p) {
          batch.tokens.push_back(prompt[static_cast<size_t>(p)]);
          batch.slots.push_back(a.slot);
          batch.positions.push_back(p);
        }
        a.done = end;
        if (end == length) {
          batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
          finishing.push_back(i);
        }
      }
      const auto pass_start = Clock::now();
      const Tensor logits = model.forward(batch, cache, stats.prefill_times);
      stats.prefill_seconds += seconds_since(pass_start);
      ++stats.prefill_passes;
      stats.prefill_tokens += static_cast<int64_t>(batch.tokens.size());
      if (!finishing.empty()) {
        std::vector<size_t> rows;
        for (size_t i : finishing) rows.push_back(admitting[i].request);
        const std::vector<bool> ended = record(logits, rows);
        for (size_t k = 0; k < finishing.size(); ++k) {
          const Admitted& a = admitting[finishing[k]];
          if (ended[k])
            free_slots.push_back(a.slot);
          else
            active.push_back({a.request, a.slot, static_cast<int64_t>(requests[a.request].prompt.size())});
        }
      }
      while (next < admitting.size() && admitting[next].done == static_cast<int64_t>(requests[admitting[next].request].prompt.size()))
        ++next;
    }
    if (active.empty()) continue;

    // One decode step for every active request.
    batch.clear();
    std::vector<size_t> request_of_row;
    for (size_t i = 0; i < active.size(); ++i) {
      const Active& a = active[i];
      batch.tokens.push_back(result.outputs[a.request].tokens.back());
      batch.slots.push_back(a.slot);
      batch.positions.push_back(a.next_position);
      batch.logit_rows.push_back(static_cast<int64_t>(i));
      request_of_row.push_back(a.request);
    }
    const auto step_start = Clock::now();
    const Tensor logits = model.forward(batch, cache, stats.decode_times);
    const std::vector<bool> ended = record(logits, request_of_row);
    stats.decode_seconds += seconds_since(step_start);
    ++stats.decode_steps;
    stats.decode_tokens += static_cast<int64_t>(active.size());
    std::vector<Active> still;
    for (size_t i = 0; i < active.size(); ++i) {
      if (ended[i]) {
        free_slots.push_back(active[i].slot);
      } else {
        still.push_back(active[i]);
        ++still.back().next_position;
      }
    }
    active = std::move(still);
  }
  return result;
}

}  // namespace meshnn::serving
