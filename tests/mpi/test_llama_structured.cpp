// Structured output on the Llama model at 1, 2, 4 and 8 ranks (the vocabulary, and so the token
// mask, sharded over the mesh): every token a request with a grammar draws is the one the sampler
// picks from its raw logits once every token the grammar refuses is set to -inf, worked out here
// from the whole vocabulary by feeding each token's bytes to a cursor of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "llama_test_models.hpp"
#include "meshnn/serving/generator.hpp"
#include "meshnn/serving/json_cursor.hpp"
#include "meshnn/serving/json_grammar.hpp"
#include "meshnn/serving/logit_penalties.hpp"

namespace meshnn::models::llama {
namespace {

using namespace test_models;

// A made-up vocabulary of JSON pieces for the tiny model's 250 ids: single characters (every one
// the schemas' keys and literals need, so no answer is ever stuck), longer pieces sharing starts, and ids 0-2 and a few more writing nothing,
// like special tokens.
std::shared_ptr<const serving::TokenBytes> json_pieces(int64_t vocab) {
  const std::vector<std::string> singles = {"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "-", ".", "e",
                                            "0", "1", "5", "9", "a", "b", "t", "r", "u", "f", "l", "s",
                                            "n", "o", "k", "y", "i", "d", "m", "p", "\\", "\xC3\xA9"};
  const std::vector<std::string> parts = {"{\"", "\":", "\",", "\"}", "true", "null", "false", "ok", "yes", "no",
                                          "name", "\": \"", "12", "],", "[{", "}]", " \"", "e5", "\"\n"};
  auto bytes = std::make_shared<serving::TokenBytes>(static_cast<size_t>(vocab));
  std::mt19937 rng(4);
  for (int64_t id = 3; id < vocab; ++id) {
    if (id % 41 == 0) continue;
    const size_t k = static_cast<size_t>(id - 3);
    if (k < singles.size()) {
      (*bytes)[static_cast<size_t>(id)] = singles[k];
    } else {
      std::string t;
      for (int n = 1 + static_cast<int>(rng() % 2); n > 0; --n)
        t += rng() % 3 == 0 ? singles[rng() % singles.size()] : parts[rng() % parts.size()];
      (*bytes)[static_cast<size_t>(id)] = t;
    }
  }
  return bytes;
}

// The stop token of these runs: it writes nothing.
constexpr int32_t kStop = 1;

// The sampler's choice from `logits` (the whole vocabulary, raw) after the request's logit bias and
// the grammar's mask, given the answer so far (`made`): the tokens the grammar takes next, and the
// stop token where the answer may end; -1 when nothing is allowed.
int32_t expected_token(std::span<const float> logits, const serving::TokenBytes& bytes, const serving::JsonCursor& at,
                       const GenerationRequest& r, std::span<const int32_t> made) {
  std::vector<float> masked(logits.begin(), logits.end());
  if (r.penalties)
    serving::apply_penalties(masked, serving::VocabShard{0, static_cast<int64_t>(masked.size())}, *r.penalties,
                             r.prompt, made);
  bool any = false;
  for (size_t id = 0; id < masked.size(); ++id) {
    serving::JsonCursor c = at;
    const bool takes = (id == kStop && at.may_end()) ||
                       (id != kStop && id < bytes.size() && !bytes[id].empty() && c.feed(bytes[id]));
    if (!takes) masked[id] = -std::numeric_limits<float>::infinity();
    any = any || takes;
  }
  if (!any) return -1;
  const serving::SampleRow row{r.id, static_cast<int64_t>(made.size())};
  return serving::sample_full(masked, static_cast<int64_t>(masked.size()), std::span(&row, 1),
                              r.sampling.value_or(serving::SamplingParams{}))[0];
}

TEST(Llama, StructuredOutputDrawsFromTheGrammarsTokens) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto bytes = json_pieces(config.vocab_size);
  std::vector<GenerationRequest> requests = ragged_requests(config.vocab_size, 40);
  const auto any_object = serving::JsonGrammar::any_object();
  const auto person = serving::JsonGrammar::from_schema(
      R"({"type": "object", "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"},
          "kind": {"enum": ["yes", "no", 15]}}, "required": ["ok", "kind"], "additionalProperties": false})");
  requests[0].grammar = any_object;
  requests[1].grammar = person;
  requests[2].grammar = person;
  requests[2].sampling = serving::SamplingParams{serving::SamplingMode::TOP_P, 0.8, 0, 0.95, 3};
  // Choices, one whole where a longer one goes on ("yes", "yes please"): there the stop token may
  // end the answer. The first request's choices all begin with "yes", and a bias draws the stop
  // token wherever it is allowed: it must end with "yes". The second samples.
  GenerationRequest choosing = requests[1];
  choosing.id = 7;
  choosing.grammar = serving::JsonGrammar::choice({"yes", "yes please", "yes sir"});
  choosing.penalties = serving::LogitPenalties{0, 0, 1, {{kStop, 100.0f}}};
  requests.push_back(choosing);
  choosing.id = 8;
  choosing.grammar = serving::JsonGrammar::choice({"yes", "yes please", "no", "okay"});
  choosing.penalties.reset();
  choosing.sampling = serving::SamplingParams{serving::SamplingMode::TOP_P, 1.0, 0, 1.0, 11};
  requests.push_back(choosing);
  // requests[3] runs beside them without a grammar: its tokens are those it makes alone.
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(3, 96, DataType::FLOAT32);
  GenerationOptions go;
  go.keep_logits = true;
  go.token_bytes = bytes;
  go.stop_token_ids = {kStop};
  const GenerationResult result = serving::generate(model, cache, requests, go);
  const GenerationResult free_run = serving::generate(model, cache, std::span(&requests[3], 1), go);

  bool drawn_as_masked = true, ended_right = true;
  int completed = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].grammar) continue;
    const serving::RequestOutput& out = result.outputs[i];
    serving::JsonCursor at(*requests[i].grammar);
    const auto vocab = static_cast<size_t>(config.vocab_size);
    bool stopped = false;  // by the stop token, where the answer may end
    for (size_t t = 0; t < out.tokens.size(); ++t) {
      const std::span<const float> logits(out.logits.data() + t * vocab, vocab);
      const int32_t want = expected_token(logits, *bytes, at, requests[i], std::span(out.tokens).first(t));
      drawn_as_masked = drawn_as_masked && out.tokens[t] == want;
      stopped = want == kStop;
      drawn_as_masked = drawn_as_masked && (stopped || at.feed((*bytes)[static_cast<size_t>(out.tokens[t])]));
      if (!drawn_as_masked || stopped) break;
    }
    ended_right = ended_right && out.completed == (at.complete() || stopped) &&
                  (out.completed || static_cast<int64_t>(out.tokens.size()) == requests[i].max_new_tokens);
    completed += out.completed ? 1 : 0;
  }
  const bool beside = result.outputs[3].tokens == free_run.outputs[0].tokens && !result.outputs[3].completed;
  // "yes", then the stop token the bias draws where the answer may end.
  const std::vector<int32_t>& yes = result.outputs[4].tokens;
  std::string written;
  for (size_t t = 0; t + 1 < yes.size(); ++t) written += (*bytes)[static_cast<size_t>(yes[t])];
  const bool ended_on_stop = written == "yes" && !yes.empty() && yes.back() == kStop && result.outputs[4].completed;
  // The schema's answers are short ({"ok":true,"kind":"no"}) and the choices shorter: at least
  // three close within 40 tokens.
  EXPECT_TRUE(all_ranks_ok(drawn_as_masked && ended_right && beside && completed >= 3 && ended_on_stop))
      << "drawn as masked: " << drawn_as_masked << ", ended right: " << ended_right << ", completed: " << completed
      << ", the request without a grammar unchanged: " << beside << ", a choice ended on the stop token: "
      << ended_on_stop << " ('" << written << "')";
}

// What a grammar forces from `at`, found here by trying every byte: while exactly one byte other
// than whitespace may come (and the value is not complete, nor a choice whole), it comes (the
// schemas below write no whitespace in their keys and literals). Then spelled with the longest
// pieces of `bytes` (the highest id of equal ones).
std::vector<int32_t> expected_forced(serving::JsonCursor at, const serving::TokenBytes& bytes) {
  std::string forced;
  for (;;) {
    if (at.complete() || at.may_end()) break;
    int only = -1, count = 0;
    for (int b = 0; b < 256; ++b) {
      serving::JsonCursor t = at;
      if (b == ' ' || b == '\n' || b == '\t' || b == '\r' || !t.feed(static_cast<uint8_t>(b))) continue;
      ++count;
      only = b;
    }
    if (count != 1) break;
    at.feed(static_cast<uint8_t>(only));
    forced.push_back(static_cast<char>(only));
  }
  std::vector<int32_t> tokens;
  for (size_t at_byte = 0; at_byte < forced.size();) {
    int32_t best = -1;
    for (size_t id = 0; id < bytes.size(); ++id) {
      const std::string& piece = bytes[id];
      if (!piece.empty() && forced.compare(at_byte, piece.size(), piece) == 0 &&
          (best < 0 || piece.size() >= bytes[static_cast<size_t>(best)].size()))
        best = static_cast<int32_t>(id);
    }
    if (best < 0) break;
    tokens.push_back(best);
    at_byte += bytes[static_cast<size_t>(best)].size();
  }
  return tokens;
}

// Jump-forward: after each drawn token, the tokens the grammar forces (found and spelled above)
// follow at once; every other token is the one the sampler picks, masked, from the model's logits
// at that point, recomputed here by prefilling the prompt and the answer so far; the value closes;
// fewer passes than tokens ran; a request without a grammar beside them is unchanged.
TEST(Llama, JumpForwardWritesWhatTheGrammarForcesAndDrawsTheRest) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  const auto bytes = json_pieces(config.vocab_size);
  std::vector<GenerationRequest> requests = ragged_requests(config.vocab_size, 40);
  requests[0].grammar = serving::JsonGrammar::from_schema(
      R"({"type": "object", "properties": {"data": {"type": "object", "properties": {"kind": {"enum": ["yes", "no"]}},
          "required": ["kind"], "additionalProperties": false}}, "required": ["data"], "additionalProperties": false})");
  requests[1].grammar = serving::JsonGrammar::from_schema(
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}, "ok": {"type": "boolean"},
          "kind": {"enum": ["yes", "no", 15]}}, "required": ["ok", "kind", "name"], "additionalProperties": false})");
  requests[2].grammar = serving::JsonGrammar::choice({"okay", "nope"});
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(4, 128, DataType::FLOAT32);
  GenerationOptions go;
  go.token_bytes = bytes;
  go.stop_token_ids = {kStop};
  go.jump_forward = true;
  const GenerationResult result = serving::generate(model, cache, requests, go);
  const GenerationResult free_run = serving::generate(model, cache, std::span(&requests[3], 1), go);

  // Walk each answer: forced runs as expected_forced says, the drawn tokens to check by a replay.
  bool forced_right = true, closed = true;
  int64_t forced = 0;
  std::vector<GenerationRequest> replays;
  std::vector<std::pair<size_t, serving::JsonCursor>> drawn_at;  // (request, cursor before the drawn token)
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<int32_t>& tokens = result.outputs[i].tokens;
    serving::JsonCursor at(*requests[i].grammar);
    for (size_t t = 0; t < tokens.size();) {
      GenerationRequest replay = requests[i];
      replay.id = static_cast<int64_t>(replays.size());
      replay.grammar.reset();
      replay.max_new_tokens = 1;
      replay.prompt.insert(replay.prompt.end(), tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(t));
      replays.push_back(std::move(replay));
      drawn_at.emplace_back(i, at);
      forced_right = forced_right && at.feed((*bytes)[static_cast<size_t>(tokens[t])]);
      ++t;
      for (int32_t want : expected_forced(at, *bytes)) {
        if (t == tokens.size()) break;  // max_new_tokens
        forced_right = forced_right && tokens[t] == want && at.feed((*bytes)[static_cast<size_t>(want)]);
        ++t;
        ++forced;
      }
      if (!forced_right) break;
    }
    closed = closed && at.complete() && result.outputs[i].completed;
  }
  GenerationOptions plain;
  plain.keep_logits = true;
  serving::KvCache replay_cache = model.make_cache(4, 128, DataType::FLOAT32);
  const GenerationResult replayed = serving::generate(model, replay_cache, replays, plain);
  // Each drawn token against the masked greedy choice at its point; a point where the two likeliest
  // allowed tokens are nearer than rounding between a prefill and a decode pass is not judged.
  int judged = 0, agreed = 0;
  for (size_t k = 0; k < replays.size(); ++k) {
    const auto& [i, at] = drawn_at[k];
    const std::vector<float>& logits = replayed.outputs[k].logits;
    std::vector<float> allowed;
    for (size_t id = 0; id < logits.size(); ++id) {
      serving::JsonCursor c = at;
      if ((id == kStop && at.may_end()) || (id != kStop && !(*bytes)[id].empty() && c.feed((*bytes)[id])))
        allowed.push_back(logits[id]);
    }
    std::sort(allowed.rbegin(), allowed.rend());
    if (allowed.size() > 1 && allowed[0] - allowed[1] < 1e-3f) continue;
    ++judged;
    const size_t t = replays[k].prompt.size() - requests[i].prompt.size();
    const int32_t want = expected_token(logits, *bytes, at, requests[i], std::span(result.outputs[i].tokens).first(t));
    agreed += result.outputs[i].tokens[t] == want ? 1 : 0;
  }
  const bool fewer_passes = result.stats.forced_tokens == forced && forced > 0;
  const bool beside = result.outputs[3].tokens == free_run.outputs[0].tokens;
  EXPECT_TRUE(all_ranks_ok(forced_right && closed && judged >= static_cast<int>(replays.size()) - 2 && agreed == judged &&
                           fewer_passes && beside))
      << "forced tokens as the grammar says: " << forced_right << ", values closed: " << closed << ", drawn tokens "
      << agreed << " of " << judged << " judged (" << replays.size() << " drawn), forced " << forced << " (stats "
      << result.stats.forced_tokens << "), the request without a grammar unchanged: " << beside;
}

// A request with a grammar needs the token bytes; without them it is refused before any pass.
TEST(Llama, StructuredOutputNeedsTheTokenBytes) {
  const std::string file = model_file(false);
  const LlamaConfig config = config_of(file);
  std::vector<GenerationRequest> requests = ragged_requests(config.vocab_size, 4);
  requests[1].grammar = serving::JsonGrammar::any_object();
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::FLOAT32, DataType::FLOAT32});
  serving::KvCache cache = model.make_cache(2, 64, DataType::FLOAT32);
  std::string message;
  try {
    serving::generate(model, cache, requests, GenerationOptions{});
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_TRUE(all_ranks_ok(message.find("request 1: structured output needs the model's tokenizer") != std::string::npos))
      << message;
}

}  // namespace
}  // namespace meshnn::models::llama
