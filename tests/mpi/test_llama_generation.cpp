// The generation loop on the Llama model at 1, 2, 4 and 8 ranks (the vocabulary sharded over the
// mesh): continuous batching against solo runs, stop tokens, conversations' cached prefixes and
// prefix reuse, requests joining a running generator, log-probabilities, penalties and logit bias,
// and speculative decoding by prompt lookup.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "llama_test_models.hpp"
#include "meshnn/models/llama/model.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/serving/generator.hpp"
#include "support/llama_reference.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::models::llama {
namespace {

using namespace test_models;  // the fixtures, and the names they use

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

// reuse_prefixes across slots: requests that begin alike (many users behind one system prompt)
// copy the common start from another slot's cache, busy or free, instead of prefilling it again,
// and those arriving together wait for the first to prefill it. A request continuing a running
// request's answer copies its prompt and answer so far. Every request gets the tokens of a fresh
// prefill, and its logits to float32 rounding.
TEST(Llama, SharedPrefixesAreCopiedFromOtherSlots) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto vocab = static_cast<int32_t>(config.vocab_size);
  auto tokens = [&](int64_t count, int32_t seed) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < count; ++i) t.push_back(static_cast<int32_t>((seed * 31 + i * 17 + i * i) % vocab));
    return t;
  };
  const std::vector<int32_t> system = tokens(64, 3);
  auto request = [&](uint64_t id, std::vector<int32_t> prompt) {
    GenerationRequest r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.max_new_tokens = 12;
    return r;
  };
  auto behind_system = [&](uint64_t id, int64_t count, int32_t first) {
    std::vector<int32_t> p = system, own = tokens(count, static_cast<int32_t>(id));
    own[0] = first;  // the requests part after the system prompt
    p.insert(p.end(), own.begin(), own.end());
    return request(id, p);
  };
  const GenerationRequest a = behind_system(1, 5, 1), b = behind_system(2, 12, 2), c = behind_system(3, 40, 3);
  const auto size = [](const GenerationRequest& r) { return static_cast<int64_t>(r.prompt.size()); };
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  // a's prompt (69 tokens) in three passes, b and c waiting for it, then copying all of the system
  // prompt; and in one pass with room to spare, which b and c leave unused to wait for it. (With
  // 32 tokens or fewer of it left for a to prefill, they would prefill those beside a instead.)
  for (int64_t chunk : {32, 100}) {
    GenerationOptions go;
    go.keep_logits = true;
    go.prefill_chunk = chunk;
    go.reuse_prefixes = true;
    serving::KvCache cache = model.make_cache(5, 128, DataType::FLOAT32);
    std::vector<serving::RequestOutput> out(5);
    std::vector<std::vector<int32_t>> made(5);
    go.on_token = [&](size_t handle, int32_t token, bool, const serving::TokenLogprobs*) {
      made[handle].push_back(token);
    };
    serving::Generator generator(model, cache, go,
                                 [&](size_t handle, serving::RequestOutput&& o) { out[handle] = std::move(o); });
    for (const GenerationRequest& r : {a, b, c}) generator.submit(r);
    while (made[0].size() < 5) generator.step();
    // While all three decode: d continues b's prompt, e continues a's prompt and its first three
    // tokens; each then differs from what its source holds.
    std::vector<int32_t> d_prompt = b.prompt;
    d_prompt.push_back((made[1][0] + 1) % vocab);
    for (int32_t t : {5, 6, 7}) d_prompt.push_back(t);
    std::vector<int32_t> e_prompt = a.prompt;
    e_prompt.insert(e_prompt.end(), made[0].begin(), made[0].begin() + 3);
    e_prompt.push_back((made[0][3] + 1) % vocab);
    const GenerationRequest d = request(4, d_prompt), e = request(5, e_prompt);
    generator.submit(d);
    generator.submit(e);
    while (!generator.idle()) generator.step();

    const std::vector<GenerationRequest> all{a, b, c, d, e};
    bool same = true;
    double worst = 1.0;
    for (size_t i = 0; i < all.size(); ++i) {
      serving::KvCache fresh_cache = model.make_cache(1, 128, DataType::FLOAT32);
      GenerationOptions plain = go;
      plain.on_token = {};
      const serving::RequestOutput fresh = serving::generate(model, fresh_cache, std::span(&all[i], 1), plain).outputs[0];
      same = same && out[i].tokens == fresh.tokens;
      worst = std::min(worst, pcc(out[i].logits, fresh.logits));
    }
    // Copied: the system prompt for b and c, all of b's prompt for d, a's prompt and 3 answer
    // tokens for e. Prefilled: the rest.
    const int64_t shared = 64 + 64 + size(b) + size(a) + 3;
    const int64_t prompts = size(a) + size(b) + size(c) + size(d) + size(e);
    const serving::GenerationStats& s = generator.stats();
    EXPECT_TRUE(all_ranks_ok(same && worst >= 0.99999 && s.shared_prompt_tokens == shared &&
                             s.reused_prompt_tokens == shared && s.prefill_tokens == prompts - shared))
        << "prefill_chunk " << chunk << ": tokens of fresh prefills: " << same << ", min PCC " << worst
        << ", copied " << s.shared_prompt_tokens << " of " << shared << " (reused " << s.reused_prompt_tokens
        << "), prefilled " << s.prefill_tokens << " of " << prompts - shared;
  }
}

}  // namespace
}  // namespace meshnn::models::llama
