#include "meshnn/server/serve.hpp"

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <fmt/format.h>
#include <unordered_map>

#include <unistd.h>

#include "frontend.hpp"
#include "mesh_messages.hpp"
#include "root_relay.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::server {
namespace {

volatile std::sig_atomic_t g_stop_requested = 0;
extern "C" void request_stop(int) { g_stop_requested = 1; }

// A duplicate of a communicator, freed at the end of its scope.
struct ControlComm {
  explicit ControlComm(MPI_Comm of) { MESHNN_MPI_CHECK(MPI_Comm_dup(of, &comm)); }
  ~ControlComm() { MPI_Comm_free(&comm); }
  ControlComm(const ControlComm&) = delete;
  ControlComm& operator=(const ControlComm&) = delete;
  MPI_Comm comm = MPI_COMM_NULL;
};

// Where a replica's busy time went: the passes (forward and sampling) and what the server adds.
void print_account(const std::string& who, size_t requests, const serving::GenerationStats& s, double busy_seconds) {
  const double passes = s.prefill_seconds + s.decode_seconds;
  std::printf("%s: %zu request(s); %lld prefill pass(es) of %lld prompt tokens (%lld more taken from the cache), "
              "%lld decode step(s) of %lld tokens (%.2f ms per step); %.3f s in passes of %.3f s busy\n",
              who.c_str(), requests, static_cast<long long>(s.prefill_passes), static_cast<long long>(s.prefill_tokens),
              static_cast<long long>(s.reused_prompt_tokens), static_cast<long long>(s.decode_steps),
              static_cast<long long>(s.decode_tokens),
              s.decode_steps > 0 ? 1e3 * s.decode_seconds / static_cast<double>(s.decode_steps) : 0.0, passes,
              busy_seconds);
  std::fflush(stdout);
}

}  // namespace

void serve(const serving::CausalLm& model, serving::KvCache& cache, const MeshDevice& world, int replica,
           int replicas, const ServeOptions& options, const ServeText& text) {
  const MPI_Comm world_comm = world.comm(), group_comm = model.mesh()->comm();
  const bool root = world.device_id() == 0, leader = model.mesh()->device_id() == 0;
  MESHNN_CHECK(!root || (leader && replica == 0), "serve: world rank 0 must lead replica 0");
  // Ctrl-C reaches every rank through mpirun; rank 0's decides, the others wait to be told.
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end rank 0
  // Each replica's leader, as a world rank (control plane: MPI's own gather is fine here).
  std::vector<int> leader_of(static_cast<size_t>(world.num_devices()));
  const int mine = leader ? replica : -1;
  MESHNN_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, leader_of.data(), 1, MPI_INT, world_comm));
  std::vector<int> leader_rank(static_cast<size_t>(replicas), -1);
  for (size_t rank = 0; rank < leader_of.size(); ++rank)
    if (leader_of[rank] >= 0) leader_rank[static_cast<size_t>(leader_of[rank])] = static_cast<int>(rank);
  // The server's messages between rank 0 and the leaders go on a communicator of their own, which
  // rank 0's relay thread may use while its main thread runs a pass.
  ControlComm control(world_comm);
  int thread_level = MPI_THREAD_SINGLE;
  MESHNN_MPI_CHECK(MPI_Query_thread(&thread_level));
  const bool relay_thread = replicas > 1 && thread_level == MPI_THREAD_MULTIPLE;

  std::unique_ptr<Frontend> frontend;
  std::unique_ptr<RootRelay> relay;
  serving::Generator* generator_ptr = nullptr;
  // Tickets are the frontend's numbers; handles the generator's, in this replica's submission order.
  std::vector<uint64_t> ticket_of;
  std::unordered_map<uint64_t, size_t> handle_of;
  TokenReport report;  // a leader of another replica than rank 0's: what to tell rank 0 after the pass
  Outbox outbox;       // that leader's reports in flight
  bool stopping = false;
  serving::GenerationOptions go = options.generation;
  if (root) {
    frontend = std::make_unique<Frontend>(
        options, text, [&](const serving::GenerationRequest& r) { generator_ptr->check(r, "the request"); },
        reinterpret_cast<const volatile int*>(&g_stop_requested));
    relay = std::make_unique<RootRelay>(*frontend, control.comm, leader_rank, cache.slots(), relay_thread);
    go.on_token = [&](size_t handle, int32_t token, bool /*last: the ending follows*/, const serving::TokenLogprobs* logprobs) {
      frontend->on_token(ticket_of[handle], token, logprobs);
    };
    go.on_prompt_logprobs = [&](size_t handle, const std::vector<serving::TokenLogprobs>& logprobs) {
      frontend->on_prompt_logprobs(ticket_of[handle], logprobs);
    };
  } else if (leader) {
    go.on_token = [&](size_t handle, int32_t token, bool /*last: the ending follows*/, const serving::TokenLogprobs* logprobs) {
      report.tokens.push_back({ticket_of[handle], token, logprobs ? std::optional(*logprobs) : std::nullopt});
    };
    go.on_prompt_logprobs = [&](size_t handle, const std::vector<serving::TokenLogprobs>& logprobs) {
      report.prompts.push_back({ticket_of[handle], logprobs});
    };
  }
  serving::Generator generator(model, cache, go, [&](size_t handle, serving::RequestOutput&& output) {
    const uint64_t ticket = ticket_of[handle];
    handle_of.erase(ticket);
    if (root)
      relay->ended_on_replica_0(ticket, stopping, output.cancelled, output.completed);
    else if (leader)
      report.endings.push_back({ticket, stopping, output.cancelled, output.completed});
  });
  generator_ptr = &generator;

  int port = 0;
  run_agreed(world_comm, "starting the HTTP server", [&] {
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
                "/health, /metrics) with %d replica(s); Ctrl-C, or SIGTERM to rank 0 (pid %d), stops it\n",
                options.model_name.c_str(), options.host.c_str(), port, replicas, static_cast<int>(getpid()));
    if (replicas > 1 && !relay_thread)
      std::printf("note: MPI gives this process thread level %d, not MPI_THREAD_MULTIPLE: rank 0 relays the other "
                  "replicas' tokens and requests only between its own passes\n", thread_level);
    std::fflush(stdout);
  }

  double busy_seconds = 0;  // the loop's time with requests in the generator, passes and the rest
  for (;;) {
    const bool idle = generator.idle();
    auto busy_since = std::chrono::steady_clock::now();
    InboxBatch batch;
    if (root) {
      batch = relay->next_batch(idle);
    } else if (leader) {
      std::string message;
      if (receive(control.comm, 0, kRouteTag, idle ? Wait::SLEEPING : Wait::NO, message)) batch = decode_batch(message);
    }
    if (model.mesh()->num_devices() > 1) batch = decode_batch(share_with_group(group_comm, encode(batch), idle));
    if (idle) busy_since = std::chrono::steady_clock::now();  // the wait for work is not busy time
    for (auto& [ticket, request] : batch.arrivals) {
      handle_of[ticket] = generator.submit(std::move(request));
      ticket_of.push_back(ticket);
    }
    for (uint64_t ticket : batch.cancels)
      if (auto it = handle_of.find(ticket); it != handle_of.end()) generator.cancel(it->second);
    if (batch.stop) {
      stopping = true;
      for (size_t handle = 0; handle < ticket_of.size(); ++handle) generator.cancel(handle);
      break;
    }
    if (!generator.idle()) {
      generator.step();
      busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since).count();
    }
    if (root) {
      relay->note_reused_on_replica_0(generator.stats().reused_prompt_tokens);
    } else if (leader && !report.empty()) {
      report.reused_prompt_tokens = generator.stats().reused_prompt_tokens;
      outbox.send(control.comm, 0, kReportTag, encode(report));
      report = {};
    }
  }
  if (leader && !root) {
    report.reused_prompt_tokens = generator.stats().reused_prompt_tokens;
    report.done = true;
    outbox.send(control.comm, 0, kReportTag, encode(report));
  }
  if (root) relay->finish();
  outbox.finish();
  if (leader)
    print_account(root ? "server stopped" : fmt::format("replica {} stopped", replica), ticket_of.size(),
                  generator.stats(), busy_seconds);
}

}  // namespace meshnn::server
