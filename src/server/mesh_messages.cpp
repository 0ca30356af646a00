#include "mesh_messages.hpp"

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::server {

using nlohmann::json;

std::string encode(const InboxBatch& b) {
  if (empty(b)) return {};
  json j;
  j["stop"] = b.stop;
  j["cancels"] = b.cancels;
  j["arrivals"] = json::array();
  for (const auto& [ticket, r] : b.arrivals) {
    json a{{"ticket", ticket},
           {"id", r.id},
           {"max_new_tokens", r.max_new_tokens},
           {"prompt", r.prompt},
           {"logprobs", r.logprobs},
           {"prompt_logprobs", r.prompt_logprobs},
           {"ignore_eos", r.ignore_eos},
           {"stop_token_ids", r.stop_token_ids},
           {"min_new_tokens", r.min_new_tokens}};
    if (r.sampling)
      a["sampling"] = {{"mode", static_cast<int>(r.sampling->mode)}, {"temperature", r.sampling->temperature},
                       {"top_k", r.sampling->top_k},         {"top_p", r.sampling->top_p},
                       {"seed", r.sampling->seed}};
    if (r.penalties)
      a["penalties"] = {{"presence", r.penalties->presence},
                        {"frequency", r.penalties->frequency},
                        {"repetition", r.penalties->repetition},
                        {"bias", r.penalties->bias}};
    // A grammar travels as its source; each device compiles it again (the same nodes).
    if (r.grammar) a["grammar"] = r.grammar->source();
    j["arrivals"].push_back(std::move(a));
  }
  return j.dump();
}

InboxBatch decode_batch(const std::string& text) {
  InboxBatch b;
  if (text.empty()) return b;
  const json j = json::parse(text);
  b.stop = j.at("stop").get<bool>();
  b.cancels = j.at("cancels").get<std::vector<uint64_t>>();
  for (const json& a : j.at("arrivals")) {
    serving::GenerationRequest r;
    r.id = a.at("id").get<uint64_t>();
    r.max_new_tokens = a.at("max_new_tokens").get<int64_t>();
    r.prompt = a.at("prompt").get<std::vector<int32_t>>();
    r.logprobs = a.at("logprobs").get<int64_t>();
    r.prompt_logprobs = a.at("prompt_logprobs").get<bool>();
    r.ignore_eos = a.at("ignore_eos").get<bool>();
    r.stop_token_ids = a.at("stop_token_ids").get<std::vector<int32_t>>();
    r.min_new_tokens = a.at("min_new_tokens").get<int64_t>();
    if (a.contains("sampling")) {
      const json& s = a.at("sampling");
      r.sampling = serving::SamplingParams{static_cast<serving::SamplingMode>(s.at("mode").get<int>()),
                                           s.at("temperature").get<double>(), s.at("top_k").get<int64_t>(),
                                           s.at("top_p").get<double>(), s.at("seed").get<uint64_t>()};
    }
    if (a.contains("penalties")) {
      const json& p = a.at("penalties");
      r.penalties = serving::LogitPenalties{p.at("presence").get<double>(), p.at("frequency").get<double>(),
                                            p.at("repetition").get<double>(),
                                            p.at("bias").get<std::vector<std::pair<int32_t, float>>>()};
    }
    if (const auto g = a.find("grammar"); g != a.end())
      r.grammar = serving::JsonGrammar::from_source(g->get<std::string>());
    b.arrivals.emplace_back(a.at("ticket").get<uint64_t>(), std::move(r));
  }
  return b;
}

std::string encode(const TokenReport& r) {
  json j;
  j["tokens"] = json::array();
  // A token's log-probabilities as [logprob, [[id, logprob], ...]]: float -> JSON -> float is exact.
  auto logprobs_json = [](const serving::TokenLogprobs& lp) { return json{lp.logprob, lp.top}; };
  j["prompts"] = json::array();
  for (const TokenReport::PromptScores& p : r.prompts) {
    json scores = json::array();
    for (const serving::TokenLogprobs& lp : p.logprobs) scores.push_back(logprobs_json(lp));
    j["prompts"].push_back({p.ticket, std::move(scores)});
  }
  for (const TokenReport::Token& t : r.tokens) {
    json token{t.ticket, t.token};
    if (t.logprobs) token.push_back(logprobs_json(*t.logprobs));
    j["tokens"].push_back(std::move(token));
  }
  j["endings"] = json::array();
  for (const TokenReport::Ending& e : r.endings) j["endings"].push_back({e.ticket, e.aborted, e.cancelled, e.completed});
  j["reused"] = r.reused_prompt_tokens;
  j["done"] = r.done;
  return j.dump();
}

TokenReport decode_report(const std::string& text) {
  const json j = json::parse(text);
  TokenReport r;
  auto logprobs_of = [](const json& lp) {
    return serving::TokenLogprobs{lp.at(0).get<float>(), lp.at(1).get<std::vector<std::pair<int32_t, float>>>()};
  };
  for (const json& p : j.at("prompts")) {
    TokenReport::PromptScores& scores = r.prompts.emplace_back();
    scores.ticket = p.at(0).get<uint64_t>();
    for (const json& lp : p.at(1)) scores.logprobs.push_back(logprobs_of(lp));
  }
  for (const json& t : j.at("tokens")) {
    TokenReport::Token& token = r.tokens.emplace_back();
    token = {t.at(0).get<uint64_t>(), t.at(1).get<int32_t>(), std::nullopt};
    if (t.size() > 2) token.logprobs = logprobs_of(t.at(2));
  }
  for (const json& e : j.at("endings"))
    r.endings.push_back({e.at(0).get<uint64_t>(), e.at(1).get<bool>(), e.at(2).get<bool>(), e.at(3).get<bool>()});
  r.reused_prompt_tokens = j.at("reused").get<int64_t>();
  r.done = j.at("done").get<bool>();
  return r;
}

bool receive(MPI_Comm comm, int from, int tag, Wait wait, std::string& message, int* source) {
  MPI_Status status;
  if (wait == Wait::AS_MPI_DOES) {
    MESHNN_MPI_CHECK(MPI_Probe(from, tag, comm, &status));
  } else {
    for (int arrived = 0;;) {
      MESHNN_MPI_CHECK(MPI_Iprobe(from, tag, comm, &arrived, &status));
      if (arrived) break;
      if (wait == Wait::NO) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  int count = 0;
  MESHNN_MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &count));
  message.assign(static_cast<size_t>(count), '\0');
  MESHNN_MPI_CHECK(
      MPI_Recv(message.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE));
  if (source != nullptr) *source = status.MPI_SOURCE;
  return true;
}

std::string share_with_group(MPI_Comm comm, const std::string& message, bool idle) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  if (rank == 0) {
    for (int r = 1; r < size; ++r)
      MESHNN_MPI_CHECK(MPI_Send(message.data(), checked_mpi_count(static_cast<int64_t>(message.size())), MPI_CHAR, r,
                                kGroupTag, comm));
    return message;
  }
  std::string received;
  receive(comm, 0, kGroupTag, idle ? Wait::SLEEPING : Wait::AS_MPI_DOES, received);
  return received;
}

void Outbox::send(MPI_Comm comm, int to, int tag, std::string message) {
  // Completed sends are dropped first, so the list holds only those in flight.
  std::erase_if(pending_, [](Pending& p) {
    int done = 0;
    MESHNN_MPI_CHECK(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  });
  pending_.push_back({std::move(message), MPI_REQUEST_NULL});
  Pending& p = pending_.back();
  MESHNN_MPI_CHECK(MPI_Isend(p.bytes.data(), checked_mpi_count(static_cast<int64_t>(p.bytes.size())), MPI_CHAR, to,
                             tag, comm, &p.request));
}

void Outbox::finish() {
  for (Pending& p : pending_) MESHNN_MPI_CHECK(MPI_Wait(&p.request, MPI_STATUS_IGNORE));
  pending_.clear();
}

}  // namespace meshnn::server
