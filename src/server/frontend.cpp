#include "frontend.hpp"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "client_socket.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/server/openai_api.hpp"
#include "meshnn/text/load.hpp"
#include "meshnn/text/text_stream.hpp"
#include "reply.hpp"

namespace meshnn::server {
namespace {

void send_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(error_body(status, message), "application/json");
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace

Frontend::Frontend(const ServeOptions& options, const ServeText& text,
                   std::function<void(const serving::GenerationRequest&)> check, const volatile int* stop_requested)
    : options_(options), text_(text), check_(std::move(check)), stop_requested_(stop_requested),
      http_(std::make_unique<httplib::Server>()) {
  const size_t threads = static_cast<size_t>(std::max(1, options_.http_threads));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(size_t{64} << 20);  // a request body beyond 64 MiB is refused (413)
  // httplib also sets SO_REUSEPORT, which would let a second server share the port and take half of
  // its connections; SO_REUSEADDR alone still allows a restart while old connections linger.
  http_->set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (text_.tokenizer != nullptr) token_texts_.emplace(*text_.tokenizer);
  install_routes();
}

// Also on an error that leaves the mesh loop: no HTTP thread may be left waiting for tokens.
Frontend::~Frontend() { shut_down(); }

int Frontend::bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                                      : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  MESHNN_CHECK(port > 0, "the server cannot listen on {}:{} (is the port in use, or the host not this machine's?)",
               options_.host, options_.port);
  return port;
}

void Frontend::start() {
  listener_ = std::thread([this] { http_->listen_after_bind(); });
}

void Frontend::shut_down() {
  auto abort = [](Ticket& ticket) {
    {
      std::lock_guard ticket_lock(ticket.mutex);
      ticket.finished = ticket.aborted = true;
    }
    ticket.changed.notify_all();
  };
  {
    // Requests that arrived after the loop's last look, or that the loop left unfinished (an error
    // ended it), end as aborted: no HTTP thread may wait for tokens that will not come, since
    // stopping the server joins those threads.
    std::lock_guard lock(inbox_mutex_);
    closed_ = true;
    for (auto& [number, ticket] : submitted_) abort(*ticket);
    submitted_.clear();
  }
  {
    std::lock_guard lock(running_mutex_);
    for (auto& [number, ticket] : running_) abort(*ticket);
    running_.clear();
  }
  {
    // The aborted answers' last chunks and [DONE] go out before the server stops: httplib ends a
    // stream where it is once stopping. A client that reads nothing does not hold the stop for long.
    std::unique_lock lock(responses_mutex_);
    responses_ended_.wait_for(lock, std::chrono::seconds(10), [&] { return open_responses_ == 0; });
  }
  if (listener_.joinable()) {
    http_->stop();
    listener_.join();
  }
}

std::vector<std::shared_ptr<Ticket>> Frontend::submit(const serving::GenerationRequest& request, bool seeded,
                                                      int64_t choices) {
  std::vector<std::shared_ptr<Ticket>> tickets;
  std::lock_guard lock(inbox_mutex_);
  if (closed_) return tickets;
  for (int64_t choice = 0; choice < choices; ++choice) {
    auto ticket = tickets.emplace_back(std::make_shared<Ticket>());
    ticket->number = next_ticket_++;
    serving::GenerationRequest r = request;
    // A seeded request's choices draw the same tokens whenever it comes (choice 0 those of n = 1);
    // the others draw apart.
    r.id = seeded ? static_cast<uint64_t>(choice) : ticket->number + 1;
    inbox_.arrivals.emplace_back(ticket->number, std::move(r));
    submitted_.emplace(ticket->number, ticket);
  }
  inbox_changed_.notify_one();
  return tickets;
}

void Frontend::cancel(uint64_t ticket) {
  std::lock_guard lock(inbox_mutex_);
  inbox_.cancels.push_back(ticket);
  inbox_changed_.notify_one();
}

InboxBatch Frontend::collect(int wait_ms) {
  std::unique_lock lock(inbox_mutex_);
  auto something = [&] { return !inbox_.arrivals.empty() || !inbox_.cancels.empty() || *stop_requested_ != 0; };
  // A signal cannot notify the condition variable, so a wait is cut into short ones that look at
  // the stop flag.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (!something() && std::chrono::steady_clock::now() < until)
    inbox_changed_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(
                                      std::chrono::milliseconds(50), until - std::chrono::steady_clock::now()));
  InboxBatch batch;
  std::swap(batch, inbox_);
  batch.stop = *stop_requested_ != 0;
  std::lock_guard running_lock(running_mutex_);
  for (const auto& [number, request] : batch.arrivals) {
    running_.emplace(number, std::move(submitted_.at(number)));
    submitted_.erase(number);
    prompt_tokens_ += static_cast<int64_t>(request.prompt.size());
  }
  running_count_ = static_cast<int64_t>(running_.size());
  return batch;
}

std::shared_ptr<Ticket> Frontend::running_ticket(uint64_t ticket) {
  std::lock_guard lock(running_mutex_);
  return running_.at(ticket);
}

void Frontend::on_token(uint64_t ticket, int32_t token, const serving::TokenLogprobs* logprobs) {
  const std::shared_ptr<Ticket> t = running_ticket(ticket);
  {
    std::lock_guard lock(t->mutex);
    t->tokens.push_back(token);
    if (logprobs != nullptr) t->logprobs.push_back(*logprobs);
  }
  t->changed.notify_all();
  ++generated_tokens_;
}

void Frontend::on_prompt_logprobs(uint64_t ticket, const std::vector<serving::TokenLogprobs>& logprobs) {
  const std::shared_ptr<Ticket> t = running_ticket(ticket);
  std::lock_guard lock(t->mutex);
  t->prompt_logprobs = logprobs;
}

void Frontend::on_finish(uint64_t ticket, bool aborted, bool cancelled, bool completed) {
  std::shared_ptr<Ticket> t;
  {
    std::lock_guard lock(running_mutex_);
    auto it = running_.find(ticket);
    if (it == running_.end()) return;
    t = std::move(it->second);
    running_.erase(it);
    running_count_ = static_cast<int64_t>(running_.size());
  }
  {
    std::lock_guard lock(t->mutex);
    t->finished = true;
    t->aborted = aborted;
    t->completed = completed;
  }
  t->changed.notify_all();
  ++(aborted || cancelled ? cancelled_ : finished_);
}

serving::GenerationRequest Frontend::request_of(const ApiRequest& api) const {
  serving::GenerationRequest g;
  if (api.endpoint == Endpoint::CHAT_COMPLETIONS) {
    if (text_.chat_template == nullptr || text_.tokenizer == nullptr)
      throw ApiError(400, "this server has no chat template it can run (the model has none, or one meshnn cannot "
                          "run: see the server's startup notes; start it with --chat-template FILE) or no "
                          "tokenizer: use /v1/completions");
    text::ChatTemplateInputs inputs;
    inputs.messages = api.messages;
    inputs.special_tokens = text_.special_tokens;
    inputs.now = std::time(nullptr);
    inputs.json_variables = text::with_variables(text_.chat_variables, api.chat_template_kwargs);
    if (!api.tools.empty()) {
      if (!api.tool_choice_none && options_.tool_call_parser == ToolCallParser::NONE)
        throw ApiError(400, "'tools' with tool_choice \"auto\", \"required\" or a function needs a server started "
                            "with --tool-call-parser (hermes); with tool_choice \"none\" the model sees the tools but "
                            "its calls are not parsed");
      inputs.json_variables = text::with_variables(std::move(inputs.json_variables), {{"tools", api.tools}});
    }
    // As apply_chat_template: the template writes BOS where the model wants it.
    g.prompt = text::encode_prompt(*text_.tokenizer, text_.chat_template->render(inputs), std::nullopt);
  } else if (api.prompt) {
    if (text_.tokenizer == nullptr) throw ApiError(400, "this model has no tokenizer: give the prompt as a list of token ids");
    g.prompt = text::encode_prompt(*text_.tokenizer, *api.prompt, text_.bos);
  } else {
    g.prompt = api.prompt_token_ids;
  }
  g.max_new_tokens = api.max_tokens.value_or(options_.default_max_tokens);
  g.logprobs = api.logprobs.value_or(-1);
  g.prompt_logprobs = api.echo && api.logprobs.has_value();
  g.sampling = sampling_of(api, options_.generation.sampling);
  g.ignore_eos = api.ignore_eos;
  g.stop_token_ids = api.stop_token_ids;
  g.min_new_tokens = api.min_tokens.value_or(0);
  if (api.presence_penalty || api.frequency_penalty || api.repetition_penalty || !api.logit_bias.empty())
    g.penalties = penalties_of(api, options_.generation.penalties);
  if ((api.json_schema || !api.choice.empty()) && text_.tokenizer == nullptr)
    throw ApiError(400, "'response_format' and 'structured_outputs' need the model's tokenizer, to know what each "
                        "token writes");
  if (api.json_schema) g.grammar = serving::JsonGrammar::from_schema(*api.json_schema);
  if (!api.choice.empty()) g.grammar = serving::JsonGrammar::choice(api.choice);
  if (api.tool_choice_required) {
    // The answer is one call block, its JSON following the tool's parameters.
    const ToolCallGrammar call = tool_call_grammar(options_.tool_call_parser, api.tools, api.tool_choice_name);
    try {
      g.grammar = serving::JsonGrammar::from_schema(call.schema, call.open, call.close);
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("tool_choice: the tools' parameters cannot be followed: {}", e.what()));
    }
  }
  check_(g);
  return g;
}

void Frontend::answer(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  ApiRequest api;
  serving::GenerationRequest g;
  try {
    api = parse_request(req.body, endpoint);
    // As vLLM: a request naming another model is an error, not an answer from this one.
    if (!api.model.empty() && api.model != options_.model_name)
      throw ApiError(404, fmt::format("The model `{}` does not exist: this server serves `{}`", api.model,
                                      options_.model_name));
    g = request_of(api);
  } catch (const ApiError& e) {
    ++rejected_;
    return send_error(res, e.status(), e.what());
  } catch (const Error& e) {
    ++rejected_;
    return send_error(res, 400, e.what());
  }
  const std::vector<int32_t> prompt = g.prompt;
  const std::vector<std::shared_ptr<Ticket>> tickets = submit(g, api.seed.has_value(), api.n);
  if (tickets.empty()) return send_error(res, 503, "the server is shutting down");
  {
    std::lock_guard lock(responses_mutex_);
    ++open_responses_;
  }
  const ResponseHeader header{endpoint,
                              fmt::format("{}-{}", endpoint == Endpoint::CHAT_COMPLETIONS ? "chatcmpl" : "cmpl",
                                          tickets.front()->number),
                              unix_now(), options_.model_name};
  // Without a tokenizer the ids are the answer.
  const bool ids = api.return_token_ids || text_.tokenizer == nullptr;
  // The ids whose arrival means "stop" rather than "length": the request's, and the eos unless ignored.
  std::vector<int32_t> stop_ids = api.stop_token_ids;
  if (!api.ignore_eos)
    stop_ids.insert(stop_ids.end(), options_.generation.stop_token_ids.begin(), options_.generation.stop_token_ids.end());
  const bool logprobs = api.logprobs.has_value();
  // echo: the answer begins with the prompt, as given (ids as their text), and its scores.
  const std::string echoed = !api.echo                    ? std::string()
                             : api.prompt                 ? *api.prompt
                             : text_.tokenizer != nullptr ? text::generated_text(*text_.tokenizer, prompt)
                                                          : std::string();
  // The first piece's log-probabilities: the echoed prompt's, then its tokens'.
  auto first_shown = [this, prompt, echo = api.echo](const Reply::Piece& p) {
    std::vector<TokenLogprob> shown = echo ? shown_prompt_logprobs(prompt, p.prompt_logprobs) : std::vector<TokenLogprob>{};
    for (TokenLogprob& t : shown_logprobs(p.ids, p.logprobs)) shown.push_back(std::move(t));
    return shown;
  };
  // Chat answers go through the server's parsers: the reasoning apart (reasoning.hpp), and with
  // tools, the calls (tool_calls.hpp).
  const bool chat = endpoint == Endpoint::CHAT_COMPLETIONS;
  const ReasoningParser reasoning = chat ? options_.reasoning_parser : ReasoningParser::NONE;
  const ToolCallParser tools =
      chat && !api.tools.empty() && !api.tool_choice_none ? options_.tool_call_parser : ToolCallParser::NONE;
  const bool parsed = reasoning != ReasoningParser::NONE || tools != ToolCallParser::NONE;
  // Each choice is a request of the generator's with its own ticket: its reply, its parsers, and
  // its cancel (a stop string ends that choice alone).
  struct Answer {
    std::shared_ptr<Reply> reply;
    std::shared_ptr<ChatAnswerParser> parser;
    std::function<void()> cancel;
    bool first = true;
    int64_t text_offset = 0;  // characters of the token texts streamed so far
  };
  auto answers = std::make_shared<std::vector<Answer>>();
  for (const std::shared_ptr<Ticket>& ticket : tickets)
    answers->push_back({std::make_shared<Reply>(ticket, text_, stop_ids, api.stop),
                        std::make_shared<ChatAnswerParser>(reasoning, tools, ticket->number),
                        [this, number = ticket->number] { this->cancel(number); }});
  if (!api.stream) {
    // Nothing is written before the end, so a client that hangs up is noticed on its socket.
    const std::optional<ClientSocket> client = ClientSocket::find(req.remote_addr, req.remote_port, req.local_port);
    const std::function<bool()> client_gone = [&client] { return client && client->hung_up(); };
    const size_t n = answers->size();
    std::vector<std::vector<int32_t>> tokens(n);
    std::vector<std::vector<TokenLogprob>> shown(n);
    std::vector<ChatAnswerParser::Piece> parts(n);
    std::vector<Choice> choices(n);
    Usage usage{static_cast<int64_t>(prompt.size()), 0};
    // The choices run side by side in the generator; their ends are taken one after another.
    for (size_t c = 0; c < n; ++c) {
      Answer& a = (*answers)[c];
      std::string text = echoed;
      std::optional<FinishReason> finish;
      for (bool first = true; !finish; first = false) {
        Reply::Piece p = a.reply->next(a.cancel, client_gone);
        text += p.text;
        tokens[c].insert(tokens[c].end(), p.ids.begin(), p.ids.end());
        if (logprobs)
          for (TokenLogprob& t : first ? first_shown(p) : shown_logprobs(p.ids, p.logprobs)) shown[c].push_back(std::move(t));
        finish = p.finish;
      }
      usage.completion_tokens += static_cast<int64_t>(a.reply->tokens_taken());
      parts[c] = a.parser->push(text, /*last=*/true);
      choices[c] = {parts[c].content, a.parser->finish(*finish), ids ? &tokens[c] : nullptr,
                    logprobs ? &shown[c] : nullptr, parsed ? &parts[c].extras : nullptr};
    }
    res.set_content(response_body(header, choices, usage, ids ? &prompt : nullptr), "application/json");
    response_ended();
    return;
  }
  // Streamed, the choices take turns: each call writes the next piece of the next choice still
  // running, which waits for that choice's next tokens.
  auto turn = std::make_shared<size_t>(0);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, answers, turn, header, ids, logprobs, echoed, first_shown, parsed,
       prompt_tokens = static_cast<int64_t>(prompt.size()), usage = api.include_usage](size_t, httplib::DataSink& sink) {
        const size_t n = answers->size();
        for (size_t looked = 0; (*answers)[*turn % n].reply->done(); ++*turn)
          if (++looked > n) return false;  // every choice has ended: nothing is left to write
        const auto index = static_cast<int64_t>(*turn % n);
        Answer& a = (*answers)[static_cast<size_t>(index)];
        ++*turn;
        Reply::Piece p = a.reply->next(a.cancel);
        std::string out;
        if (a.first) p.text = echoed + p.text;
        const ChatAnswerParser::Piece answer = a.parser->push(p.text, p.finish.has_value());
        const bool news = !answer.content.empty() || !answer.extras.tool_calls.empty() ||
                          (answer.extras.reasoning && !answer.extras.reasoning->empty());
        if (news || !p.ids.empty() || a.first) {
          const std::vector<TokenLogprob> shown =
              !logprobs ? std::vector<TokenLogprob>{} : a.first ? first_shown(p) : shown_logprobs(p.ids, p.logprobs);
          out += stream_chunk(header, answer.content, std::nullopt, a.first, ids ? &p.ids : nullptr,
                              logprobs ? &shown : nullptr, a.text_offset, parsed ? &answer.extras : nullptr, index);
          for (const TokenLogprob& t : shown) a.text_offset += characters(t.token);
        }
        a.first = false;
        if (p.finish)
          out += stream_chunk(header, "", a.parser->finish(*p.finish), false, nullptr, nullptr, 0, nullptr, index);
        const bool all_done = std::all_of(answers->begin(), answers->end(), [](const Answer& x) { return x.reply->done(); });
        if (all_done) {
          int64_t completion_tokens = 0;
          for (const Answer& x : *answers) completion_tokens += static_cast<int64_t>(x.reply->tokens_taken());
          if (usage) out += stream_usage_chunk(header, {prompt_tokens, completion_tokens});
          out += kStreamEnd;
        }
        if (!sink.write(out.data(), out.size())) return false;
        if (all_done) sink.done();
        return true;
      },
      [this, answers](bool) {
        // The client went away (or the write failed) before the answer ended: free the slots.
        for (const Answer& a : *answers)
          if (!a.reply->done()) a.cancel();
        response_ended();
      });
}

std::string Frontend::token_text(int32_t id) const {
  // Without a tokenizer a token shows as its id, as vLLM's return_tokens_as_token_ids does.
  return token_texts_ ? (*token_texts_)(id) : fmt::format("token_id:{}", id);
}

std::vector<TokenLogprob> Frontend::shown_logprobs(const std::vector<int32_t>& ids,
                                                   const std::vector<serving::TokenLogprobs>& logprobs) const {
  std::vector<TokenLogprob> shown;
  shown.reserve(logprobs.size());
  for (size_t i = 0; i < logprobs.size() && i < ids.size(); ++i) {
    TokenLogprob& t = shown.emplace_back();
    t.token = token_text(ids[i]);
    t.logprob = logprobs[i].logprob;
    for (const auto& [id, logprob] : logprobs[i].top) t.top.emplace_back(token_text(id), logprob);
  }
  return shown;
}

std::vector<TokenLogprob> Frontend::shown_prompt_logprobs(const std::vector<int32_t>& prompt,
                                                          const std::vector<serving::TokenLogprobs>& logprobs) const {
  std::vector<TokenLogprob> shown;
  TokenLogprob& first = shown.emplace_back();
  first.token = token_text(prompt.front());
  first.unscored = true;
  const std::vector<int32_t> rest(prompt.begin() + 1, prompt.begin() + 1 + static_cast<int64_t>(logprobs.size()));
  for (TokenLogprob& t : shown_logprobs(rest, logprobs)) shown.push_back(std::move(t));
  return shown;
}

void Frontend::response_ended() {
  {
    std::lock_guard lock(responses_mutex_);
    --open_responses_;
  }
  responses_ended_.notify_all();
}

void Frontend::install_routes() {
  httplib::Server& s = *http_;
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::ordered_json model{{"id", options_.model_name}, {"object", "model"}, {"created", unix_now()},
                                 {"owned_by", "meshnn"}};
    res.set_content(nlohmann::ordered_json{{"object", "list"}, {"data", {model}}}.dump(), "application/json");
  });
  // Prometheus' text format, as vLLM's /metrics (its names under meshnn:).
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    int64_t waiting = 0;
    {
      std::lock_guard lock(inbox_mutex_);
      waiting = static_cast<int64_t>(submitted_.size());
    }
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, int64_t value) {
      out += fmt::format("# HELP meshnn:{} {}\n# TYPE meshnn:{} {}\nmeshnn:{} {}\n", name, help, name, type, name, value);
    };
    metric("num_requests_running", "gauge", "Requests in the generator (waiting for a slot or generating).",
           running_count_.load());
    metric("num_requests_arriving", "gauge", "Requests received and not yet handed to the mesh.", waiting);
    metric("prompt_tokens_total", "counter", "Prompt tokens of the requests handed to the mesh.", prompt_tokens_.load());
    metric("prompt_tokens_reused_total", "counter",
           "Prompt tokens taken from the KV cache instead of prefilled (a start another request left or holds).",
           reused_prompt_tokens_.load());
    metric("generation_tokens_total", "counter", "Tokens generated.", generated_tokens_.load());
    metric("requests_finished_total", "counter", "Requests that ended at their stop token or max_tokens.",
           finished_.load());
    metric("requests_cancelled_total", "counter",
           "Requests ended early: the client went away, a stop string, or the server stopped.", cancelled_.load());
    metric("requests_rejected_total", "counter", "Requests refused with an error status.", rejected_.load());
    res.set_content(out, "text/plain; version=0.0.4");
  });
  // httplib's own refusals (no route, a body beyond the limit, a malformed request) in OpenAI's shape.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404   ? "no such route"
                             : res.status == 413 ? "the request body is larger than 64 MiB"
                                                 : fmt::format("refused with HTTP status {}", res.status);
    send_error(res, res.status, fmt::format("{} {}: {}", req.method, req.path, what));
  });

  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    answer(Endpoint::COMPLETIONS, req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    answer(Endpoint::CHAT_COMPLETIONS, req, res);
  });
}

}  // namespace meshnn::server
