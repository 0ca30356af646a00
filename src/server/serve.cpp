#include "meshnn/server/serve.hpp"

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <fmt/format.h>
#include <thread>
#include <unordered_map>

#include <unistd.h>

#include "frontend.hpp"
#include "mesh_messages.hpp"
#include "meshnn/server/router.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::server {
namespace {

volatile std::sig_atomic_t g_stop_requested = 0;
extern "C" void request_stop(int) { g_stop_requested = 1; }

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

  std::unique_ptr<Frontend> frontend;
  serving::Generator* generator_ptr = nullptr;
  // Tickets are the frontend's numbers; handles the generator's, in this replica's submission order.
  std::vector<uint64_t> ticket_of;
  std::unordered_map<uint64_t, size_t> handle_of;
  TokenReport report;  // a leader of another replica than rank 0's: what to tell rank 0 after the pass
  bool stopping = false;
  serving::GenerationOptions go = options.generation;
  if (root) {
    frontend = std::make_unique<Frontend>(
        options, text, [&](const serving::GenerationRequest& r) { generator_ptr->check(r, "the request"); },
        reinterpret_cast<const volatile int*>(&g_stop_requested));
    go.on_token = [&](size_t handle, int32_t token, bool last) { frontend->on_token(ticket_of[handle], token, last); };
  } else if (leader) {
    go.on_token = [&](size_t handle, int32_t token, bool last) {
      report.tokens.push_back({ticket_of[handle], token, last});
    };
  }
  Router router(replicas, cache.slots());
  std::unordered_map<uint64_t, int> replica_of;  // rank 0: where each running ticket went
  serving::Generator generator(model, cache, go, [&](size_t handle, serving::RequestOutput&&) {
    const uint64_t ticket = ticket_of[handle];
    handle_of.erase(ticket);
    if (root) {
      frontend->on_finish(ticket, stopping);
      router.ended(0);
      replica_of.erase(ticket);
    } else if (leader) {
      report.endings.push_back({ticket, stopping});
    }
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
    std::fflush(stdout);
  }

  // Rank 0: the other replicas' tokens and endings, passed on to the HTTP threads.
  Outbox outbox;
  int replicas_done = 0;
  std::vector<int64_t> reused_by_replica(static_cast<size_t>(replicas), 0);
  auto deliver = [&](const std::string& message, int source) {
    const TokenReport r = decode_report(message);
    for (const TokenReport::Token& t : r.tokens) frontend->on_token(t.ticket, t.token, t.last);
    for (const TokenReport::Ending& e : r.endings) {
      frontend->on_finish(e.ticket, e.aborted);
      if (auto it = replica_of.find(e.ticket); it != replica_of.end()) {
        router.ended(it->second);
        replica_of.erase(it);
      }
    }
    reused_by_replica[static_cast<size_t>(leader_of[static_cast<size_t>(source)])] = r.reused_prompt_tokens;
    replicas_done += r.done ? 1 : 0;
  };
  auto deliver_arrived = [&] {
    std::string message;
    for (int source = 0; receive(world_comm, MPI_ANY_SOURCE, kReportTag, false, message, &source);)
      deliver(message, source);
  };
  // Rank 0: waits (while its replica is idle) for something for its replica, sending the others theirs.
  auto next_batch_at_root = [&](bool idle) {
    for (;;) {
      // With other replicas, rank 0 also looks for their reports while it waits.
      InboxBatch all = frontend->collect(!idle ? 0 : replicas > 1 ? 1 : 200);
      std::vector<InboxBatch> parts(static_cast<size_t>(replicas));
      for (auto& [ticket, request] : all.arrivals) {
        const int r = router.route(request.prompt);
        replica_of[ticket] = r;
        parts[static_cast<size_t>(r)].arrivals.emplace_back(ticket, std::move(request));
      }
      for (uint64_t ticket : all.cancels)
        if (auto it = replica_of.find(ticket); it != replica_of.end())
          parts[static_cast<size_t>(it->second)].cancels.push_back(ticket);
      for (InboxBatch& part : parts) part.stop = all.stop;
      for (int r = 1; r < replicas; ++r)
        if (std::string m = encode(parts[static_cast<size_t>(r)]); !m.empty())
          outbox.send(world_comm, leader_rank[static_cast<size_t>(r)], kRouteTag, std::move(m));
      if (replicas > 1) deliver_arrived();
      if (!idle || !encode(parts[0]).empty()) return std::move(parts[0]);
    }
  };

  double busy_seconds = 0;  // the loop's time with requests in the generator, passes and the rest
  for (;;) {
    const bool idle = generator.idle();
    auto busy_since = std::chrono::steady_clock::now();
    InboxBatch batch;
    if (root) {
      batch = next_batch_at_root(idle);
    } else if (leader) {
      std::string message;
      if (receive(world_comm, 0, kRouteTag, idle, message)) batch = decode_batch(message);
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
      reused_by_replica[0] = generator.stats().reused_prompt_tokens;
      int64_t reused = 0;
      for (int64_t n : reused_by_replica) reused += n;
      frontend->note_reused_prompt_tokens(reused);
    } else if (leader && !report.empty()) {
      report.reused_prompt_tokens = generator.stats().reused_prompt_tokens;
      outbox.send(world_comm, 0, kReportTag, encode(report));
      report = {};
    }
  }
  if (leader && !root) {
    report.reused_prompt_tokens = generator.stats().reused_prompt_tokens;
    report.done = true;
    outbox.send(world_comm, 0, kReportTag, encode(report));
  }
  if (root) {
    // Every other replica's last report says it has stopped; nothing may be left in flight.
    std::string message;
    for (int source = 0; replicas_done < replicas - 1;) {
      receive(world_comm, MPI_ANY_SOURCE, kReportTag, true, message, &source);
      deliver(message, source);
    }
    frontend->shut_down();
  }
  outbox.finish();
  if (leader) {
    // Where the busy time went: the passes (forward and sampling) and what the server adds.
    const serving::GenerationStats& s = generator.stats();
    const double passes = s.prefill_seconds + s.decode_seconds;
    const std::string who = root ? "server stopped" : fmt::format("replica {} stopped", replica);
    std::printf("%s: %zu request(s); %lld prefill pass(es) of %lld prompt tokens (%lld more taken from the cache), "
                "%lld decode step(s) of %lld tokens (%.2f ms per step); %.3f s in passes of %.3f s busy\n",
                who.c_str(), ticket_of.size(), static_cast<long long>(s.prefill_passes),
                static_cast<long long>(s.prefill_tokens), static_cast<long long>(s.reused_prompt_tokens),
                static_cast<long long>(s.decode_steps), static_cast<long long>(s.decode_tokens),
                s.decode_steps > 0 ? 1e3 * s.decode_seconds / static_cast<double>(s.decode_steps) : 0.0, passes,
                busy_seconds);
    std::fflush(stdout);
  }
}

}  // namespace meshnn::server
