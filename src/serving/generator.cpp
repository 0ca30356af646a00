#include "meshnn/serving/generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "meshnn/core/error.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/serving/jump_forward.hpp"
#include "meshnn/serving/prompt_lookup.hpp"

namespace meshnn::serving {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The full logits of the sampled rows, composed from the vocabulary shards (every device gets them).
std::vector<float> full_logits(const CausalLm& model, const Tensor& local) {
  const MeshDevicePtr& mesh = model.mesh();
  if (mesh->num_devices() == 1) return local.to_float();
  const Shape global{1, 1, local.shape()[2], model.vocab_size()};
  return full_tensor(MeshTensor(mesh, global, {Shard{3}, Shard{3}}, local)).to_float();
}

// Rows `rows` of a [1, 1, R, W] float32 tensor, row-major.
std::vector<float> picked_rows(const Tensor& logits, std::span<const size_t> rows) {
  const int64_t width = logits.shape()[3];
  const std::vector<float> all = logits.to_float();
  std::vector<float> picked;
  picked.reserve(rows.size() * static_cast<size_t>(width));
  for (size_t r : rows)
    picked.insert(picked.end(), all.begin() + static_cast<int64_t>(r) * width,
                  all.begin() + static_cast<int64_t>(r + 1) * width);
  return picked;
}

// How many tokens `a` and `b` begin with alike, at most `limit`.
int64_t common_start(std::span<const int32_t> a, std::span<const int32_t> b, int64_t limit) {
  const auto n = static_cast<int64_t>(std::min({a.size(), b.size(), static_cast<size_t>(std::max<int64_t>(limit, 0))}));
  return std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin();
}

Tensor row_major_logits(std::span<const float> rows, int64_t width) {
  return Tensor::from_float(rows, Shape{1, 1, static_cast<int64_t>(rows.size()) / width, width}, DataType::FLOAT32,
                            Layout::ROW_MAJOR);
}

// Rows `rows` of a [1, 1, R, W] float32 tensor, as a [1, 1, rows.size(), W] row-major one.
Tensor logit_rows(const Tensor& logits, std::span<const size_t> rows) {
  return row_major_logits(picked_rows(logits, rows), logits.shape()[3]);
}

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int64_t top) {
  double most = -std::numeric_limits<double>::infinity();
  for (float x : logits) most = std::max(most, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - most);
  const double log_total = most + std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_total);
  };
  TokenLogprobs result;
  result.logprob = logprob(token);
  if (top <= 0) return result;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const auto n = std::min<int64_t>(top, static_cast<int64_t>(ids.size()));
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    return x > y || (x == y && a < b);
  });
  for (int64_t k = 0; k < n; ++k) result.top.emplace_back(ids[static_cast<size_t>(k)], logprob(ids[static_cast<size_t>(k)]));
  return result;
}

struct Generator::State {
  struct Entry {
    GenerationRequest request;
    RequestOutput output;
    Clock::time_point admitted;
    std::vector<int32_t> stop_ids;  // what ends it: its own stop tokens, and the options' unless ignore_eos
    DraftSchedule drafts{0};        // draft_tokens: how many its next pass may feed
    std::optional<JsonCursor> cursor;  // request.grammar: where its answer stands in it
    // jump_forward: the tokens at the end of the answer that its grammar wrote after the last drawn
    // one, not yet in the cache; the next pass feeds them after the drawn one.
    std::vector<int32_t> forced;
  };
  struct Active {
    size_t handle;
    int64_t slot;
    int64_t next_position;  // where the last sampled token goes in the next decode step
  };
  // A request holding a slot whose prompt is not yet wholly in the cache.
  struct Prefilling {
    size_t handle;
    int64_t slot, done = 0;
    bool waits = false;  // this pass: for a request ahead to prefill their common start (reuse_prefixes)
  };

  const CausalLm& model;
  KvCache& cache;
  GenerationOptions options;
  FinishCallback on_finish;
  GenerationStats stats;
  size_t next_handle = 0;
  std::unordered_map<size_t, Entry> entries;
  std::deque<size_t> waiting;
  std::deque<Prefilling> prefilling;
  std::vector<int64_t> free_slots;
  // reuse_prefixes: the tokens whose keys and values each slot holds from the last request that
  // ran in it, and when that request ended (a count of ended requests: the same on every device).
  std::vector<std::vector<int32_t>> held;
  std::vector<int64_t> released_at;
  int64_t releases = 0;
  // What a pass uses is made once and reused (cleared, not freed), so that a decode step after
  // the first allocates nothing: the model's buffers, the samplers', and these.
  std::vector<Active> active, still;
  TokenBatch batch;
  std::vector<size_t> handle_of_row;
  std::vector<SampleRow> sample_rows;
  std::vector<int32_t> sampled;
  std::vector<uint8_t> ended;  // per logit row of the pass: its request ended
  // prompt_logprobs: rows of the pass scoring a prompt token (the next one, from this position's
  // logits), their logits after the sampled rows'.
  struct Scored {
    size_t handle;
    int64_t position;  // scores prompt token position + 1
    int64_t row;       // in the pass's batch
  };
  std::vector<Scored> scored;
  // draft_tokens: the drafts fed this pass, each for the active request of decode row `decode_row`,
  // its rows in the batch's logit rows from `first_logit_row`; and per decode row, the drafts kept.
  struct Drafted {
    size_t decode_row;
    std::vector<int32_t> tokens;
    size_t first_logit_row;
  };
  std::vector<Drafted> drafted;
  std::vector<int64_t> kept_drafts, fed_drafts;
  std::vector<int64_t> fed_forced;  // jump_forward: per decode row, the grammar's tokens fed this pass
  // One sampler per (mode, top_k): each keeps buffers sized for its exchange, so requests with
  // different parameters do not make each other's buffers again every pass.
  std::map<std::pair<SamplingMode, int64_t>, ShardedSampler> samplers;
  // Requests with a grammar: this device's shard of the vocabulary by bytes, made for the first one;
  // with jump_forward, the whole vocabulary by bytes too.
  std::optional<TokenMask> token_mask;
  std::optional<ForcedTokens> forced_tokens;

  State(const CausalLm& m, KvCache& c, GenerationOptions o, FinishCallback f)
      : model(m), cache(c), options(std::move(o)), on_finish(std::move(f)) {
    options.sampling.validate();
    options.penalties.validate();
    for (const auto& [id, bias] : options.penalties.bias)
      MESHNN_CHECK(id < model.vocab_size(), "logit_bias names token {}, outside the vocabulary [0, {})", id,
                   model.vocab_size());
    MESHNN_CHECK(options.prefill_chunk >= 1, "prefill_chunk must be >= 1, got {}", options.prefill_chunk);
    for (int64_t s = cache.slots() - 1; s >= 0; --s) free_slots.push_back(s);  // slot 0 handed out first
    if (options.reuse_prefixes) {
      held.resize(static_cast<size_t>(cache.slots()));
      released_at.assign(static_cast<size_t>(cache.slots()), -1);
    }
    const size_t slots = static_cast<size_t>(cache.slots());
    active.reserve(slots);
    still.reserve(slots);
    handle_of_row.reserve(slots);
    sample_rows.reserve(slots);
    sampled.reserve(slots);
    sampler_for(options.sampling).reserve_rows(cache.slots());
  }

  const SamplingParams& sampling_of(size_t handle) const {
    const GenerationRequest& r = entries.at(handle).request;
    return r.sampling ? *r.sampling : options.sampling;
  }
  const LogitPenalties& penalties_of(size_t handle) const {
    const GenerationRequest& r = entries.at(handle).request;
    return r.penalties ? *r.penalties : options.penalties;
  }
  static bool ends(const Entry& e, int32_t token) {
    return std::find(e.stop_ids.begin(), e.stop_ids.end(), token) != e.stop_ids.end();
  }
  // The request may not stop yet: its stop tokens are masked in this pass's row.
  bool too_soon_to_stop(size_t handle) const {
    const Entry& e = entries.at(handle);
    return !e.stop_ids.empty() && static_cast<int64_t>(e.output.tokens.size()) < e.request.min_new_tokens;
  }
  // Sets the logits of the request's stop tokens held by this device's shard to -inf.
  void mask_stop_tokens(std::span<float> row, const Entry& e) const {
    const VocabShard shard = model.vocab_shard();
    for (int32_t id : e.stop_ids)
      if (const int64_t c = id - shard.offset; c >= 0 && c < shard.valid)
        row[static_cast<size_t>(c)] = -std::numeric_limits<float>::infinity();
  }
  ShardedSampler& sampler_for(const SamplingParams& p) { return samplers[{p.mode, p.top_k}]; }

  // Sets to -inf the logits of this device's tokens that the request's grammar does not take next,
  // its stop tokens among them, unless the answer may end here (JsonCursor::may_end): then its
  // stop tokens keep what they had.
  void mask_by_grammar(std::span<float> row, const Entry& e) {
    const VocabShard shard = model.vocab_shard();
    std::vector<std::pair<size_t, float>> ending;
    if (e.cursor->may_end())
      for (int32_t id : e.stop_ids)
        if (const int64_t c = id - shard.offset; c >= 0 && c < shard.valid)
          ending.emplace_back(static_cast<size_t>(c), row[static_cast<size_t>(c)]);
    token_mask->apply(row, *e.cursor);
    mask_stop_tokens(row, e);
    for (const auto& [c, value] : ending) row[c] = value;
  }

  // A request leaves its slot: with reuse_prefixes, the slot remembers what its cache now holds,
  // the first `prefilled` prompt tokens and then the generated ones but the last (never fed back).
  void release(int64_t slot, size_t handle, int64_t prefilled) {
    free_slots.push_back(slot);
    if (!options.reuse_prefixes) return;
    const Entry& e = entries.at(handle);
    std::vector<int32_t>& h = held[static_cast<size_t>(slot)];
    h.assign(e.request.prompt.begin(), e.request.prompt.begin() + prefilled);
    // The answer's tokens but the last drawn one, and those its grammar wrote after it, are in the cache.
    const auto unfed = static_cast<std::ptrdiff_t>(1 + e.forced.size());
    if (prefilled == static_cast<int64_t>(e.request.prompt.size()) && !e.output.tokens.empty())
      h.insert(h.end(), e.output.tokens.begin(), e.output.tokens.end() - unfed);
    released_at[static_cast<size_t>(slot)] = releases++;
  }

  // reuse_prefixes: the free slot for a request, and how many of its prompt tokens it holds.
  std::pair<std::vector<int64_t>::iterator, int64_t> slot_for(const std::vector<int32_t>& prompt) {
    auto best = free_slots.end() - 1;
    int64_t best_length = 0;
    for (auto s = free_slots.begin(); s != free_slots.end(); ++s) {
      // The last prompt token is prefilled in any case: its logits give the first new token.
      const int64_t length = common_start(held[static_cast<size_t>(*s)], prompt, static_cast<int64_t>(prompt.size()) - 1);
      const bool longer = length > best_length;
      const bool older = length == best_length && released_at[static_cast<size_t>(*s)] <
                                                      released_at[static_cast<size_t>(*best)];
      if (longer || older) {
        best = s;
        best_length = length;
      }
    }
    return {best, best_length};
  }

  // reuse_prefixes: the length of the common start of `prompt` and the tokens whose keys and
  // values slot `slot` holds now, at most `limit`. A prefilling request's slot holds its prompt up
  // to where it is prefilled; an active one's its prompt and its tokens but the last (the next
  // decode row feeds that one); a free slot what its last request left (`held`).
  int64_t held_start(int64_t slot, const std::vector<int32_t>& prompt, int64_t limit) const {
    for (const Prefilling& p : prefilling)
      if (p.slot == slot)
        return common_start(std::span(entries.at(p.handle).request.prompt).first(static_cast<size_t>(p.done)), prompt,
                            limit);
    for (const Active& a : active) {
      if (a.slot != slot) continue;
      const Entry& e = entries.at(a.handle);
      const int64_t in_prompt = common_start(e.request.prompt, prompt, limit);
      if (in_prompt < static_cast<int64_t>(e.request.prompt.size())) return in_prompt;
      const std::span<const int32_t> answer = std::span(e.output.tokens).first(e.output.tokens.size() - 1);
      return in_prompt + common_start(answer, std::span(prompt).subspan(static_cast<size_t>(in_prompt)), limit - in_prompt);
    }
    return common_start(held[static_cast<size_t>(slot)], prompt, limit);
  }

  // reuse_prefixes: before a pass, every prefilling request whose prompt goes on further in
  // another slot's cache than in its own copies those positions over (a memory copy on each
  // device, no pass), as when many users' requests begin with the same system prompt; then
  // decides whether it waits this pass (waits_for_shared_prefix).
  void copy_shared_prefixes() {
    if (!options.reuse_prefixes) return;
    for (size_t index = 0; index < prefilling.size(); ++index) {
      Prefilling& p = prefilling[index];
      const GenerationRequest& r = entries.at(p.handle).request;
      const int64_t limit = static_cast<int64_t>(r.prompt.size()) - 1;  // the last prompt token is prefilled
      p.waits = false;
      if (r.prompt_logprobs || p.done >= limit) continue;
      int64_t source = -1, longest = p.done;
      for (int64_t slot = 0; slot < cache.slots(); ++slot)
        if (slot != p.slot)
          if (const int64_t length = held_start(slot, r.prompt, limit); length > longest) {
            source = slot;
            longest = length;
          }
      if (source >= 0) {
        cache.copy_positions(source, p.slot, p.done, longest);
        stats.reused_prompt_tokens += longest - p.done;
        stats.shared_prompt_tokens += longest - p.done;
        p.done = longest;
      }
      p.waits = waits_for_shared_prefix(index);
    }
  }

  // A prefilling request waits while one ahead of it has yet to prefill at least a tile's worth
  // (32 tokens) of their common start beyond where it stands, and then copies it
  // (copy_shared_prefixes) instead of computing it again. Requests ahead are prefilled first in
  // any case, so the wait costs it little; the first in line never waits. A shorter common start
  // (a chat template's opening tokens) is not worth a pass of waiting: it is prefilled again.
  bool waits_for_shared_prefix(size_t index) const {
    constexpr int64_t kWorthWaitingFor = 32;
    const Prefilling& p = prefilling[index];
    const GenerationRequest& r = entries.at(p.handle).request;
    const int64_t limit = static_cast<int64_t>(r.prompt.size()) - 1;
    for (size_t k = 0; k < index; ++k) {
      const Prefilling& ahead = prefilling[k];
      const int64_t common = common_start(entries.at(ahead.handle).request.prompt, r.prompt, limit);
      if (common >= p.done + kWorthWaitingFor && ahead.done < common) return true;
    }
    return false;
  }

  void finish(size_t handle) {
    auto it = entries.find(handle);
    RequestOutput output = std::move(it->second.output);
    entries.erase(it);
    if (on_finish) on_finish(handle, std::move(output));
  }

  void admit() {
    // Every free slot takes the next waiting request; one whose prompt begins in a slot's cache
    // takes that slot, and waits for it.
    while (!free_slots.empty() && !waiting.empty()) {
      Entry& e = entries.at(waiting.front());
      auto slot = free_slots.end() - 1;
      int64_t cached = e.request.cached_prefix;
      if (cached > 0) {
        slot = std::find(free_slots.begin(), free_slots.end(), e.request.cached_slot);
        if (slot == free_slots.end()) break;
      } else if (options.reuse_prefixes) {
        // A request that scores its prompt prefills it whole: it takes the slot idle longest.
        std::tie(slot, cached) =
            slot_for(e.request.prompt_logprobs ? std::vector<int32_t>{e.request.prompt.front()} : e.request.prompt);
        stats.reused_prompt_tokens += cached;
      }
      e.output.tokens.reserve(static_cast<size_t>(e.request.max_new_tokens));
      if (options.keep_logits) e.output.logits.reserve(static_cast<size_t>(e.request.max_new_tokens * model.vocab_size()));
      if (e.request.logprobs >= 0) e.output.logprobs.reserve(static_cast<size_t>(e.request.max_new_tokens));
      if (e.request.prompt_logprobs) e.output.prompt_logprobs.reserve(e.request.prompt.size() - 1);
      prefilling.push_back({waiting.front(), *slot, cached});
      e.admitted = Clock::now();
      waiting.pop_front();
      free_slots.erase(slot);
    }
  }

  // draft_tokens: whether a request's next tokens may be guessed, and how many fit (after the one
  // its decode row makes: within max_new_tokens and the positions the cache and model hold).
  int64_t draft_room(const Active& a) const {
    const Entry& e = entries.at(a.handle);
    const GenerationRequest& r = e.request;
    if (options.draft_tokens <= 0 || options.keep_logits || r.logprobs >= 0 ||
        sampling_of(a.handle).mode != SamplingMode::GREEDY || penalties_of(a.handle).active() ||
        too_soon_to_stop(a.handle) || e.cursor)
      return 0;
    const int64_t limit = std::min(cache.max_seq(), model.max_positions());
    const int64_t by_tokens = r.max_new_tokens - static_cast<int64_t>(e.output.tokens.size()) - 1;
    return std::max<int64_t>(0, std::min({e.drafts.length(), by_tokens, limit - 1 - a.next_position}));
  }

  // The greedy choices at the draft rows (one exchange), then for each request the drafts its own
  // choices agree with, in order: draft j is kept when the token chosen before it equals it, and
  // the choice at its row is then the request's next token.
  void verify_drafts(const Tensor& logits) {
    kept_drafts.assign(active.size(), 0);
    if (drafted.empty()) return;
    std::vector<size_t> rows;
    std::vector<SampleRow> sample_at;
    for (const Drafted& d : drafted)
      for (size_t j = 0; j < d.tokens.size(); ++j) {
        const Entry& e = entries.at(active[d.decode_row].handle);
        rows.push_back(d.first_logit_row + j);
        sample_at.push_back({e.request.id, static_cast<int64_t>(e.output.tokens.size() + j)});
      }
    const SamplingParams greedy{};
    const std::span<const int32_t> chosen_span = sampler_for(greedy).sample(
        logit_rows(logits, rows), model.vocab_shard(), sample_at, greedy, model.mesh());
    const std::vector<int32_t> chosen(chosen_span.begin(), chosen_span.end());
    size_t at = 0;
    for (const Drafted& d : drafted) {
      const size_t i = d.decode_row;
      Entry& e = entries.at(active[i].handle);
      for (size_t j = 0; j < d.tokens.size() && !ended[i] && e.output.tokens.back() == d.tokens[j]; ++j) {
        const int32_t token = chosen[at + j];
        e.output.tokens.push_back(token);
        ++kept_drafts[i];
        ended[i] = static_cast<int64_t>(e.output.tokens.size()) >= e.request.max_new_tokens || ends(e, token);
        if (options.on_token) options.on_token(active[i].handle, token, ended[i] != 0, nullptr);
      }
      at += d.tokens.size();
      stats.accepted_draft_tokens += kept_drafts[i];
    }
  }

  // Samples the pass's logit rows (handle_of_row), appends their tokens and sets `ended`.
  void record(const Tensor& logits) {
    const auto sample_start = Clock::now();
    const size_t rows = handle_of_row.size();
    sample_rows.clear();
    for (size_t h : handle_of_row)
      sample_rows.push_back({entries.at(h).request.id, static_cast<int64_t>(entries.at(h).output.tokens.size())});
    // A pass of prompt rows that completes no prompt may still score some (prompt_logprobs).
    const SamplingParams& first = rows > 0 ? sampling_of(handle_of_row.front()) : options.sampling;
    bool uniform = true;
    for (size_t h : handle_of_row) uniform = uniform && sampling_of(h) == first;
    sampled.resize(rows);
    const bool adjusted = std::any_of(handle_of_row.begin(), handle_of_row.end(), [&](size_t h) {
      return penalties_of(h).active() || too_soon_to_stop(h) || entries.at(h).cursor;
    });
    // Rows scoring prompts follow the sampled ones; the samplers see only theirs. Penalties, masked
    // stop tokens and grammars adjust a copy: the raw logits stay for the log-probabilities. Those
    // paths allocate.
    std::optional<Tensor> sampled_logits;
    if ((!scored.empty() || adjusted || !drafted.empty()) && rows > 0) {
      std::vector<size_t> first_rows(rows);
      std::iota(first_rows.begin(), first_rows.end(), size_t{0});
      std::vector<float> copy = picked_rows(logits, first_rows);
      const auto width = static_cast<size_t>(logits.shape()[3]);
      for (size_t i = 0; i < rows && adjusted; ++i) {
        const Entry& e = entries.at(handle_of_row[i]);
        const std::span<float> row = std::span<float>(copy).subspan(i * width, width);
        apply_penalties(row, model.vocab_shard(), penalties_of(handle_of_row[i]), e.request.prompt, e.output.tokens);
        if (too_soon_to_stop(handle_of_row[i])) mask_stop_tokens(row, e);
        if (e.cursor) mask_by_grammar(row, e);
      }
      sampled_logits = row_major_logits(copy, logits.shape()[3]);
    }
    const Tensor& to_sample = sampled_logits ? *sampled_logits : logits;
    if (rows > 0 && uniform) {
      const std::span<const int32_t> next =
          sampler_for(first).sample(to_sample, model.vocab_shard(), sample_rows, first, model.mesh());
      std::copy(next.begin(), next.end(), sampled.begin());
    } else if (rows > 0) {
      // Requests with their own parameters: one exchange per group of equal parameters, in the
      // order of each group's first row (the same on every device). This path allocates.
      std::vector<uint8_t> done(rows, 0);
      for (size_t i = 0; i < rows; ++i) {
        if (done[i]) continue;
        const SamplingParams params = sampling_of(handle_of_row[i]);
        std::vector<size_t> group;
        std::vector<SampleRow> group_rows;
        for (size_t j = i; j < rows; ++j) {
          if (done[j] || !(sampling_of(handle_of_row[j]) == params)) continue;
          done[j] = 1;
          group.push_back(j);
          group_rows.push_back(sample_rows[j]);
        }
        const std::span<const int32_t> next = sampler_for(params).sample(
            logit_rows(to_sample, group), model.vocab_shard(), group_rows, params, model.mesh());
        for (size_t k = 0; k < group.size(); ++k) sampled[group[k]] = next[k];
      }
    }
    // --save-logits and log-probabilities gather the pass's full logits: those paths allocate.
    const bool any_logprobs = !scored.empty() ||
                              std::any_of(handle_of_row.begin(), handle_of_row.end(),
                                          [&](size_t h) { return entries.at(h).request.logprobs >= 0; });
    std::vector<float> full;
    if (options.keep_logits || any_logprobs) full = full_logits(model, logits);
    const int64_t vocab = model.vocab_size();
    auto full_row = [&](size_t i) {
      return std::span<const float>(full).subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
    };
    for (size_t i = 0; i < rows && any_logprobs; ++i)
      if (const int64_t top = entries.at(handle_of_row[i]).request.logprobs; top >= 0)
        entries.at(handle_of_row[i]).output.logprobs.push_back(token_logprobs(full_row(i), sampled[i], top));
    for (size_t k = 0; k < scored.size(); ++k) {
      Entry& e = entries.at(scored[k].handle);
      const int32_t next = e.request.prompt[static_cast<size_t>(scored[k].position + 1)];
      e.output.prompt_logprobs.push_back(token_logprobs(full_row(rows + k), next, std::max<int64_t>(e.request.logprobs, 0)));
    }
    stats.sampling_seconds += seconds_since(sample_start);
    ended.assign(rows, 0);
    for (size_t i = 0; i < rows; ++i) {
      Entry& e = entries.at(handle_of_row[i]);
      RequestOutput& out = e.output;
      if (out.tokens.empty()) {
        out.time_to_first_token = seconds_since(e.admitted);
        if (e.request.prompt_logprobs && options.on_prompt_logprobs)
          options.on_prompt_logprobs(handle_of_row[i], out.prompt_logprobs);
      }
      out.tokens.push_back(sampled[i]);
      if (options.keep_logits) out.logits.insert(out.logits.end(), full_row(i).begin(), full_row(i).end());
      // A grammar ends its request with the token that closes the value, or with a stop token
      // where the answer may end. A token it refuses (or one that writes nothing) can only come
      // when the mask left none, every device alike: the request ends there too.
      bool closed = false;
      if (e.cursor) {
        const bool may_end = e.cursor->may_end(), stop = ends(e, sampled[i]);
        const std::string_view bytes = token_mask->bytes(sampled[i]);
        const bool fits = !stop && !bytes.empty() && e.cursor->feed(bytes);
        out.completed = (fits && e.cursor->complete()) || (stop && may_end);
        closed = !fits || out.completed;
        if (!closed) write_forced(e);
        closed = closed || out.completed;
      }
      ended[i] = static_cast<int64_t>(out.tokens.size()) >= e.request.max_new_tokens || ends(e, sampled[i]) || closed;
      if (options.on_token) {
        const size_t drawn = out.tokens.size() - 1 - e.forced.size();
        options.on_token(handle_of_row[i], sampled[i], ended[i] != 0 && e.forced.empty(),
                         e.request.logprobs >= 0 ? &out.logprobs.back() : nullptr);
        for (size_t t = drawn + 1; t < out.tokens.size(); ++t)
          options.on_token(handle_of_row[i], out.tokens[t], ended[i] != 0 && t + 1 == out.tokens.size(), nullptr);
      }
    }
  }

  // jump_forward: the tokens the grammar forces after the one just drawn join the answer (within
  // max_new_tokens), e.forced holding them for the next pass; the value may complete with them.
  void write_forced(Entry& e) {
    if (!options.jump_forward || options.keep_logits || e.request.logprobs >= 0) return;
    if (!forced_tokens) forced_tokens.emplace(options.token_bytes);
    RequestOutput& out = e.output;
    e.forced = forced_tokens->take(*e.cursor, e.request.max_new_tokens - static_cast<int64_t>(out.tokens.size()));
    out.tokens.insert(out.tokens.end(), e.forced.begin(), e.forced.end());
    out.completed = e.cursor->complete();
    stats.forced_tokens += static_cast<int64_t>(e.forced.size());
  }

  void step() {
    admit();
    copy_shared_prefixes();
    // One pass: a decode row for every active request, then as much of the waiting prompts as the
    // prefill budget allows (a long prompt spans several passes). Every pass reads all the weights
    // once, so prompts ride along with the decode step instead of costing passes of their own.
    batch.clear();
    handle_of_row.clear();
    for (const Active& a : active) {
      const Entry& e = entries.at(a.handle);
      batch.tokens.push_back(e.output.tokens[e.output.tokens.size() - 1 - e.forced.size()]);
      batch.slots.push_back(a.slot);
      batch.positions.push_back(a.next_position);
      batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
      handle_of_row.push_back(a.handle);
    }
    const size_t decode_rows = active.size();
    size_t prompts_completed = 0;
    scored.clear();
    for (Prefilling& p : prefilling) {
      const int64_t budget = options.prefill_chunk - static_cast<int64_t>(batch.tokens.size() - decode_rows);
      if (budget <= 0 || p.waits) break;
      const std::vector<int32_t>& prompt = entries.at(p.handle).request.prompt;
      const int64_t length = static_cast<int64_t>(prompt.size()), end = std::min(length, p.done + budget);
      for (int64_t pos = p.done; pos < end; ++pos) {
        batch.tokens.push_back(prompt[static_cast<size_t>(pos)]);
        batch.slots.push_back(p.slot);
        batch.positions.push_back(pos);
        if (entries.at(p.handle).request.prompt_logprobs && pos + 1 < length)
          scored.push_back({p.handle, pos, static_cast<int64_t>(batch.tokens.size()) - 1});
      }
      stats.prefill_tokens += end - p.done;
      p.done = end;
      if (end < length) break;
      batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
      handle_of_row.push_back(p.handle);
      ++prompts_completed;
    }
    if (batch.tokens.empty()) return;  // nothing admitted: every waiting request waits for its slot
    for (const Scored& r : scored) batch.logit_rows.push_back(r.row);
    const size_t prompt_rows = batch.tokens.size() - decode_rows;
    // jump_forward: a request's forced tokens after its decode row; its next token is drawn from the
    // last one's logits.
    fed_forced.assign(decode_rows, 0);
    for (size_t i = 0; i < decode_rows; ++i) {
      Entry& e = entries.at(active[i].handle);
      for (size_t j = 0; j < e.forced.size(); ++j) {
        batch.tokens.push_back(e.forced[j]);
        batch.slots.push_back(active[i].slot);
        batch.positions.push_back(active[i].next_position + 1 + static_cast<int64_t>(j));
      }
      if (e.forced.empty()) continue;
      batch.logit_rows[i] = static_cast<int64_t>(batch.tokens.size()) - 1;
      fed_forced[i] = static_cast<int64_t>(e.forced.size());
      e.forced.clear();
    }
    // Draft rows last: their logit rows follow the sampled and the scored ones.
    drafted.clear();
    for (size_t i = 0; i < decode_rows; ++i) {
      const Active& a = active[i];
      const int64_t room = draft_room(a);
      if (room == 0) continue;
      const Entry& e = entries.at(a.handle);
      std::vector<int32_t> draft = prompt_lookup_draft(e.request.prompt, e.output.tokens, room);
      if (draft.empty()) continue;
      const size_t first_logit_row = batch.logit_rows.size();
      for (size_t j = 0; j < draft.size(); ++j) {
        batch.tokens.push_back(draft[j]);
        batch.slots.push_back(a.slot);
        batch.positions.push_back(a.next_position + 1 + static_cast<int64_t>(j));
        batch.logit_rows.push_back(static_cast<int64_t>(batch.tokens.size()) - 1);
      }
      stats.drafted_tokens += static_cast<int64_t>(draft.size());
      drafted.push_back({i, std::move(draft), first_logit_row});
    }
    const bool decode_only = prompt_rows == 0;
    const auto pass_start = Clock::now();
    // The pass as a phase of the trace: the forward pass and the sampling of its rows.
    trace::Scope phase("phase", decode_only ? "decode step" : "prefill pass");
    if (phase.active())
      phase.describe(fmt::format(R"("step":{},"decode_rows":{},"prompt_rows":{},"draft_rows":{})",
                                 decode_only ? stats.decode_steps : stats.prefill_passes, decode_rows, prompt_rows,
                                 batch.tokens.size() - decode_rows - prompt_rows));
    const Tensor& logits = model.forward(batch, cache, decode_only ? stats.decode_times : stats.prefill_times);
    ended.clear();
    if (!handle_of_row.empty() || !scored.empty()) record(logits);
    verify_drafts(logits);
    if (options.draft_tokens > 0) {
      // Every decode row's request learns how its drafts fared (none fed: a pass of its rest).
      fed_drafts.assign(decode_rows, 0);
      for (const Drafted& d : drafted) fed_drafts[d.decode_row] = static_cast<int64_t>(d.tokens.size());
      for (size_t i = 0; i < decode_rows; ++i)
        entries.at(active[i].handle).drafts.passed(fed_drafts[i], kept_drafts[i]);
    }
    phase.finish();
    (decode_only ? stats.decode_seconds : stats.prefill_seconds) += seconds_since(pass_start);
    int64_t kept = 0;
    for (int64_t k : kept_drafts) kept += k;
    for (int64_t k : fed_forced) kept += k;
    if (decode_only) {
      ++stats.decode_steps;
      stats.decode_tokens += static_cast<int64_t>(decode_rows) + kept;
    } else {
      ++stats.prefill_passes;
      stats.decode_tokens_in_prefill += static_cast<int64_t>(decode_rows) + kept;
    }

    still.clear();
    for (size_t i = 0; i < decode_rows; ++i) {
      if (ended[i]) {
        release(active[i].slot, active[i].handle, static_cast<int64_t>(entries.at(active[i].handle).request.prompt.size()));
        finish(active[i].handle);
      } else {
        still.push_back(active[i]);
        still.back().next_position += 1 + kept_drafts[i] + fed_forced[i];
      }
    }
    for (size_t k = 0; k < prompts_completed; ++k) {
      const Prefilling p = prefilling.front();
      prefilling.pop_front();
      if (ended[decode_rows + k]) {
        release(p.slot, p.handle, p.done);
        finish(p.handle);
      } else {
        still.push_back({p.handle, p.slot, static_cast<int64_t>(entries.at(p.handle).request.prompt.size())});
      }
    }
    active.swap(still);
  }

  void cancel(size_t handle) {
    if (!entries.contains(handle)) return;
    if (auto w = std::find(waiting.begin(), waiting.end(), handle); w != waiting.end()) {
      waiting.erase(w);
    } else if (auto a = std::find_if(active.begin(), active.end(), [&](const Active& x) { return x.handle == handle; });
               a != active.end()) {
      release(a->slot, handle, static_cast<int64_t>(entries.at(handle).request.prompt.size()));
      active.erase(a);
    } else if (auto p = std::find_if(prefilling.begin(), prefilling.end(),
                                     [&](const Prefilling& x) { return x.handle == handle; });
               p != prefilling.end()) {
      release(p->slot, handle, p->done);
      prefilling.erase(p);
    }
    entries.at(handle).output.cancelled = true;
    finish(handle);
  }
};

Generator::Generator(const CausalLm& model, KvCache& cache, GenerationOptions options, FinishCallback on_finish)
    : state_(std::make_unique<State>(model, cache, std::move(options), std::move(on_finish))) {}

Generator::~Generator() = default;

void Generator::check(const GenerationRequest& r, const std::string& what) const {
  const CausalLm& model = state_->model;
  const KvCache& cache = state_->cache;
  const int64_t limit = std::min(cache.max_seq(), model.max_positions());
  MESHNN_CHECK(!r.prompt.empty(), "{} has an empty prompt", what);
  MESHNN_CHECK(r.max_new_tokens >= 1, "{} asks for {} new tokens (need >= 1)", what, r.max_new_tokens);
  const int64_t length = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  MESHNN_CHECK(length <= model.max_positions(),
               "{}: prompt of {} tokens + {} new tokens = {} exceeds max_position_embeddings {}", what,
               r.prompt.size(), r.max_new_tokens, length, model.max_positions());
  MESHNN_CHECK(length <= limit, "{}: prompt of {} tokens + {} new tokens = {} exceeds the KV cache's {} positions",
               what, r.prompt.size(), r.max_new_tokens, length, limit);
  MESHNN_CHECK(r.cached_prefix >= 0 && r.cached_prefix < static_cast<int64_t>(r.prompt.size()),
               "{}: cached_prefix {} must be in [0, {}) (the last prompt token is always prefilled)", what,
               r.cached_prefix, r.prompt.size());
  MESHNN_CHECK(r.cached_prefix == 0 || (r.cached_slot >= 0 && r.cached_slot < cache.slots()),
               "{}: cached_slot {} is not a slot of the cache [0, {})", what, r.cached_slot, cache.slots());
  for (size_t t = 0; t < r.prompt.size(); ++t)
    MESHNN_CHECK(r.prompt[t] >= 0 && r.prompt[t] < model.vocab_size(),
                 "{}: token {} of the prompt is {}, outside the vocabulary [0, {})", what, t, r.prompt[t],
                 model.vocab_size());
  if (r.sampling) r.sampling->validate();
  for (int32_t id : r.stop_token_ids)
    MESHNN_CHECK(id >= 0 && id < model.vocab_size(), "{}: stop token {} is outside the vocabulary [0, {})", what, id,
                 model.vocab_size());
  MESHNN_CHECK(r.min_new_tokens >= 0 && r.min_new_tokens <= r.max_new_tokens,
               "{}: min_new_tokens {} must be in [0, max_new_tokens = {}]", what, r.min_new_tokens, r.max_new_tokens);
  if (r.penalties) {
    r.penalties->validate();
    for (const auto& [id, bias] : r.penalties->bias)
      MESHNN_CHECK(id < model.vocab_size(), "{}: logit_bias names token {}, outside the vocabulary [0, {})", what, id,
                   model.vocab_size());
  }
  MESHNN_CHECK(!r.prompt_logprobs || r.cached_prefix == 0,
               "{}: prompt log-probabilities need the whole prompt prefilled (cached_prefix 0, got {})", what,
               r.cached_prefix);
  MESHNN_CHECK(r.logprobs >= -1 && r.logprobs <= model.vocab_size(),
               "{}: logprobs {} must be -1 (none) or a count of tokens in [0, {}]", what, r.logprobs, model.vocab_size());
  MESHNN_CHECK(r.grammar == nullptr || state_->options.token_bytes != nullptr,
               "{}: structured output needs the model's tokenizer (what each token writes)", what);
}

size_t Generator::submit(GenerationRequest request) {
  const size_t handle = state_->next_handle++;
  std::vector<int32_t> stop_ids = request.stop_token_ids;
  if (!request.ignore_eos)
    stop_ids.insert(stop_ids.end(), state_->options.stop_token_ids.begin(), state_->options.stop_token_ids.end());
  std::optional<JsonCursor> cursor;
  if (request.grammar) {
    cursor.emplace(*request.grammar);
    if (!state_->token_mask) state_->token_mask.emplace(state_->options.token_bytes, state_->model.vocab_shard());
  }
  state_->entries.emplace(handle, State::Entry{std::move(request), {}, {}, std::move(stop_ids),
                                               DraftSchedule(state_->options.draft_tokens), std::move(cursor)});
  state_->waiting.push_back(handle);
  return handle;
}

void Generator::cancel(size_t handle) { state_->cancel(handle); }

bool Generator::idle() const { return state_->entries.empty(); }

void Generator::step() {
  if (!idle()) state_->step();
}

const GenerationStats& Generator::stats() const { return state_->stats; }

GenerationResult generate(const CausalLm& model, KvCache& cache, std::span<const GenerationRequest> requests,
                          const GenerationOptions& options) {
  GenerationResult result;
  result.outputs.resize(requests.size());
  Generator generator(model, cache, options,
                      [&](size_t handle, RequestOutput&& output) { result.outputs[handle] = std::move(output); });
  // Every request is checked before any pass, so a bad one fails alike on every device.
  for (size_t i = 0; i < requests.size(); ++i) generator.check(requests[i], fmt::format("request {}", i));
  for (const GenerationRequest& r : requests) generator.submit(r);
  while (!generator.idle()) generator.step();
  result.stats = generator.stats();
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
