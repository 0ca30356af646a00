#include "meshnn/server/serve.hpp"

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include <unistd.h>

#include "frontend.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::server {
namespace {

volatile std::sig_atomic_t g_stop_requested = 0;
extern "C" void request_stop(int) { g_stop_requested = 1; }

constexpr int kInboxTag = 0x5e7e;

// What rank 0 tells the other devices before each pass: the requests that arrived, the ones to
// cancel, and whether to stop. Control-plane bytes, sent point to point.
std::string encode(const InboxBatch& b) {
  if (b.arrivals.empty() && b.cancels.empty() && !b.stop) return {};
  nlohmann::json j;
  j["stop"] = b.stop;
  j["cancels"] = b.cancels;
  j["arrivals"] = nlohmann::json::array();
  for (const auto& [ticket, r] : b.arrivals) {
    nlohmann::json a{{"ticket", ticket}, {"id", r.id}, {"max_new_tokens", r.max_new_tokens}, {"prompt", r.prompt}};
    if (r.sampling)
      a["sampling"] = {{"mode", static_cast<int>(r.sampling->mode)}, {"temperature", r.sampling->temperature},
                       {"top_k", r.sampling->top_k},         {"top_p", r.sampling->top_p},
                       {"seed", r.sampling->seed}};
    j["arrivals"].push_back(std::move(a));
  }
  return j.dump();
}

InboxBatch decode(const std::string& text) {
  InboxBatch b;
  if (text.empty()) return b;
  const nlohmann::json j = nlohmann::json::parse(text);
  b.stop = j.at("stop").get<bool>();
  b.cancels = j.at("cancels").get<std::vector<uint64_t>>();
  for (const nlohmann::json& a : j.at("arrivals")) {
    serving::GenerationRequest r;
    r.id = a.at("id").get<uint64_t>();
    r.max_new_tokens = a.at("max_new_tokens").get<int64_t>();
    r.prompt = a.at("prompt").get<std::vector<int32_t>>();
    if (a.contains("sampling")) {
      const nlohmann::json& s = a.at("sampling");
      r.sampling = serving::SamplingParams{static_cast<serving::SamplingMode>(s.at("mode").get<int>()),
                                           s.at("temperature").get<double>(), s.at("top_k").get<int64_t>(),
                                           s.at("top_p").get<double>(), s.at("seed").get<uint64_t>()};
    }
    b.arrivals.emplace_back(a.at("ticket").get<uint64_t>(), std::move(r));
  }
  return b;
}

// Rank 0's message to every other device of `comm`. While the generator is idle the others wait
// for it sleeping a millisecond between looks, so an idle server leaves the cores free; while it
// runs they wait as MPI does, since the message comes at every pass.
std::string exchange(MPI_Comm comm, const std::string& message, bool idle) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  if (rank == 0) {
    for (int r = 1; r < size; ++r)
      MESHNN_MPI_CHECK(MPI_Send(message.data(), checked_mpi_count(static_cast<int64_t>(message.size())), MPI_CHAR, r,
                                kInboxTag, comm));
    return message;
  }
  MPI_Status status;
  if (idle) {
    for (int arrived = 0;;) {
      MESHNN_MPI_CHECK(MPI_Iprobe(0, kInboxTag, comm, &arrived, &status));
      if (arrived) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else {
    MESHNN_MPI_CHECK(MPI_Probe(0, kInboxTag, comm, &status));
  }
  int count = 0;
  MESHNN_MPI_CHECK(MPI_Get_count(&status, MPI_CHAR, &count));
  std::string received(static_cast<size_t>(count), '\0');
  MESHNN_MPI_CHECK(MPI_Recv(received.data(), count, MPI_CHAR, 0, kInboxTag, comm, MPI_STATUS_IGNORE));
  return received;
}

}  // namespace

void serve(const serving::CausalLm& model, serving::KvCache& cache, const MeshDevice& mesh, const ServeOptions& options,
           const ServeText& text) {
  const bool root = mesh.device_id() == 0;
  // Ctrl-C reaches every rank through mpirun; rank 0's decides, the others wait to be told.
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end rank 0

  std::unique_ptr<Frontend> frontend;
  serving::Generator* generator_ptr = nullptr;
  serving::GenerationOptions go = options.generation;
  if (root) {
    frontend = std::make_unique<Frontend>(
        options, text, [&](const serving::GenerationRequest& r) { generator_ptr->check(r, "the request"); },
        reinterpret_cast<const volatile int*>(&g_stop_requested));
    go.on_token = [&](size_t handle, int32_t token, bool last) { frontend->on_token(handle, token, last); };
  }
  bool stopping = false;
  serving::Generator generator(model, cache, go, [&](size_t handle, serving::RequestOutput&&) {
    if (frontend) frontend->on_finish(handle, stopping);
  });
  generator_ptr = &generator;

  int port = 0;
  run_agreed(mesh.comm(), "starting the HTTP server", [&] {
    if (!root) return;
    port = frontend->bind();
    if (!options.port_file.empty()) {
      std::ofstream f(options.port_file);
      f << port << '\n';
      MESHNN_CHECK(f.good(), "cannot write the port file '{}'", options.port_file);
    }
  });
  if (root) {
    frontend->start();
    // mpirun forwards Ctrl-C and then exits with status 1 whatever the ranks return; a signal to
    // rank 0 itself stops the server with every status 0.
    std::printf("serving %s on http://%s:%d/v1 (OpenAI API: /v1/completions, /v1/chat/completions, /v1/models; "
                "/health, /metrics); Ctrl-C, or SIGTERM to rank 0 (pid %d), stops it\n",
                options.model_name.c_str(), options.host.c_str(), port, static_cast<int>(getpid()));
    std::fflush(stdout);
  }
  size_t submitted = 0;
  double busy_seconds = 0;  // the loop's time with requests in the generator, passes and the rest
  for (;;) {
    const bool idle = generator.idle();
    auto busy_since = std::chrono::steady_clock::now();
    std::string message;
    if (root) message = encode(frontend->collect(idle ? 200 : 0));
    const InboxBatch batch = decode(exchange(mesh.comm(), message, idle));
    if (idle) busy_since = std::chrono::steady_clock::now();  // the wait for work is not busy time
    for (const auto& [ticket, request] : batch.arrivals) {
      MESHNN_CHECK(ticket == submitted, "server: ticket {} arrived out of order (expected {})", ticket, submitted);
      generator.submit(request);
      ++submitted;
    }
    for (uint64_t ticket : batch.cancels) generator.cancel(ticket);
    if (batch.stop) {
      stopping = true;
      for (size_t handle = 0; handle < submitted; ++handle) generator.cancel(handle);
      break;
    }
    if (generator.idle()) continue;
    generator.step();
    if (root) frontend->note_reused_prompt_tokens(generator.stats().reused_prompt_tokens);
    busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since).count();
  }
  if (root) {
    frontend->shut_down();
    // Where the busy time went: the passes (forward and sampling) and what the server adds.
    const serving::GenerationStats& s = generator.stats();
    const double passes = s.prefill_seconds + s.decode_seconds;
    std::printf("server stopped: %zu request(s); %lld prefill pass(es) of %lld prompt tokens (%lld more taken from "
                "the cache), %lld decode step(s) of %lld tokens (%.2f ms per step); %.3f s in passes of %.3f s busy\n",
                submitted, static_cast<long long>(s.prefill_passes), static_cast<long long>(s.prefill_tokens),
                static_cast<long long>(s.reused_prompt_tokens),
                static_cast<long long>(s.decode_steps), static_cast<long long>(s.decode_tokens),
                s.decode_steps > 0 ? 1e3 * s.decode_seconds / static_cast<double>(s.decode_steps) : 0.0, passes,
                busy_seconds);
    std::fflush(stdout);
  }
}

}  // namespace meshnn::server
