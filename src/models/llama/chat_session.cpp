#include "chat_session.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/models/every_rank.hpp"
#include "meshnn/serving/generator.hpp"
#include "meshnn/text/text_stream.hpp"
#include "meshnn/text/utf8.hpp"

namespace meshnn::models::llama {
namespace {

// Device 0's next message: the next line of stdin with more than blanks in it; nullopt at the
// end of input. Other devices read nothing (Open MPI forwards stdin to rank 0 alone).
std::optional<std::string> read_message(bool reader) {
  if (!reader) return std::nullopt;
  std::printf("\n> ");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // Valid UTF-8 from here on: the template, the tokenizer and the transcript's JSON need it.
    if (line.find_first_not_of(" \t") != std::string::npos) return text::sanitize_utf8(line);
    std::printf("> ");
    std::fflush(stdout);
  }
  std::printf("\n");
  return std::nullopt;
}

// One JSON line per turn: the conversation so far, the answer last, and the answer's ids. Its
// "messages" without the last one are the turn's request as a --prompts line would give it.
class Transcript {
 public:
  explicit Transcript(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::app);
    MESHNN_CHECK(out_.good(), "cannot open the transcript '{}' for writing", path);
  }
  void add(const std::vector<text::ChatMessage>& messages, const std::vector<int32_t>& answer_tokens) {
    if (!out_.is_open()) return;
    nlohmann::ordered_json line;
    line["messages"] = nlohmann::json::array();
    for (const text::ChatMessage& m : messages) line["messages"].push_back({{"role", m.role}, {"content", m.content}});
    line["answer_tokens"] = answer_tokens;
    out_ << line.dump() << '\n';
    out_.flush();
    MESHNN_CHECK(out_.good(), "writing the transcript failed");
  }

 private:
  std::ofstream out_;
};

// How many leading tokens of `prompt` the cache already holds, of `cached`; the last prompt token
// is always prefilled, since its logits give the first new token.
int64_t reusable_prefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) {
  const size_t limit = std::min(cached.size(), prompt.size() - 1);
  size_t n = 0;
  while (n < limit && cached[n] == prompt[n]) ++n;
  return static_cast<int64_t>(n);
}

void print_turn_figures(const serving::GenerationRequest& request, const serving::GenerationResult& result) {
  const serving::GenerationStats& s = result.stats;
  const double rate = s.decode_seconds > 0 ? static_cast<double>(s.decode_tokens) / s.decode_seconds : 0;
  std::printf("  [%zu prompt tokens, %lld of them from the cache; first token after %.2f s; %zu tokens at %.1f "
              "tokens/s]\n",
              request.prompt.size(), static_cast<long long>(request.cached_prefix),
              result.outputs.front().time_to_first_token, result.outputs.front().tokens.size(), rate);
}

}  // namespace

void run_chat_session(const LlmJobConfig& c, const JobRequests& job, const LlamaModel& model,
                      serving::KvCache& cache, int64_t max_context, const MeshDevice& mesh, std::time_t now) {
  const bool reader = mesh.device_id() == 0;
  const text::Tokenizer& tokenizer = *job.tokenizer->tokenizer;
  text::ChatTemplateInputs conversation;
  conversation.special_tokens = job.tokenizer->special_tokens;
  conversation.now = now;
  conversation.json_variables = job.chat_variables;
  if (!c.system_prompt.empty()) conversation.messages.push_back({"system", c.system_prompt});

  std::optional<Transcript> transcript;
  on_root(mesh, "opening the transcript", [&] { transcript.emplace(c.transcript); });
  serving::GenerationOptions go = generation_options(c, job);
  std::optional<text::TextStream> stream;
  if (reader) {
    go.on_token = [&](size_t, int32_t token, bool last, const serving::TokenLogprobs*) {
      std::string piece = stream->push(token);
      if (last) piece += stream->finish() + "\n";
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  }
  // The tokens whose keys and values slot 0 of the cache holds: the last turn's prompt and its
  // answer but the last token, which was never fed back.
  std::vector<int32_t> cached;
  for (uint64_t turn = 0;; ++turn) {
    std::optional<std::string> message = root_text(mesh.comm(), read_message(reader));
    if (!message) return;
    conversation.messages.push_back({"user", std::move(*message)});
    serving::GenerationRequest request;
    request.id = turn;  // each turn's draws its own
    request.max_new_tokens = c.max_new_tokens;
    on_every_rank(mesh, "rendering the conversation", [&] {
      request.prompt = text::encode_prompt(tokenizer, job.chat_template->render(conversation), std::nullopt);
      MESHNN_CHECK(!request.prompt.empty(), "the chat template rendered no text");
    });
    const auto needed = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
    if (needed > max_context) {
      if (reader)
        std::printf("(this turn needs %lld positions, beyond the context of %lld: the conversation ends here)\n",
                    static_cast<long long>(needed), static_cast<long long>(max_context));
      return;
    }
    // The conversation so far is in the cache from the turn before, as far as its tokens agree.
    request.cached_prefix = reusable_prefix(cached, request.prompt);
    if (reader) stream.emplace(tokenizer);
    serving::GenerationResult result;
    on_every_rank(mesh, "answering", [&] { result = serving::generate(model, cache, {&request, 1}, go); });
    // Special tokens (the eos that ended the answer) decode to nothing, as with
    // skip_special_tokens in Hugging Face's chat loops.
    const std::vector<int32_t>& answer = result.outputs.front().tokens;
    conversation.messages.push_back({"assistant", text::generated_text(tokenizer, answer)});
    cached = request.prompt;
    cached.insert(cached.end(), answer.begin(), answer.end() - 1);
    if (reader) print_turn_figures(request, result);
    on_root(mesh, "writing the transcript", [&] { transcript->add(conversation.messages, answer); });
  }
}

}  // namespace meshnn::models::llama
