// The Direct schedule shared by every collective: one step, every member straight to every other,
// then a combine in the ring's order so that Direct and Ring give the same bits.
#include <algorithm>

#include "builders.hpp"

namespace meshnn::ccl::detail {

void exchange_direct(const CallContext& ctx, std::string_view name, double watchdog, size_t bytes,
                     size_t chunk_bytes, FunctionRef<const std::byte*(int to)> outgoing,
                     FunctionRef<std::byte*(int from)> incoming, FunctionRef<void()> while_in_flight,
                     FunctionRef<void(size_t offset, size_t bytes)> arrived) {
  Transport& t = ctx.transport;
  const int n = t.size(), p = t.position();
  const size_t chunks = chunk_count(bytes, chunk_bytes);
  if (chunks <= 1 && DirectExchange::fits(n)) {
    // The small-message path: one message per peer needs no dependency tracking, so no Plan.
    DirectExchange exchange(t, ctx.tag_base);
    for (int q = 1; q < n; ++q) {
      const int to = mod(p + q, n), from = mod(p - q, n);
      exchange.send(to, 0, outgoing(to), bytes);
      exchange.recv(from, 0, incoming(from), bytes);
    }
    exchange.post();
    while_in_flight();
    exchange.wait(name, watchdog);
    arrived(0, bytes);
    return;
  }
  Plan plan(t, std::string(name), ctx.tag_base, watchdog);
  ScratchScope scratch;
  Prims prims(plan, scratch);
  plan.local(0, [&] { while_in_flight(); });
  // Peers at increasing distance, so that no two members start on the same receiver; chunk c of
  // every message on lane c mod links.
  std::vector<Deps> chunk_arrived(chunks);
  for (int q = 1; q < n; ++q) {
    const int to = plan.peer(q), from = plan.peer(-q);
    for (size_t c = 0; c < chunks; ++c) {
      const size_t off = c * chunk_bytes, len = std::min(chunk_bytes, bytes - off);
      const int lane = lane_of(static_cast<int>(c), 0, ctx.num_links, 0);
      prims.send(to, lane, 0, outgoing(to) + off, len);
      chunk_arrived[c].push_back(prims.direct_recv(from, lane, 0, incoming(from) + off, len));
    }
  }
  for (size_t c = 0; c < chunks; ++c) {
    const size_t off = c * chunk_bytes, len = std::min(chunk_bytes, bytes - off);
    plan.local(1, [&arrived, off, len] { arrived(off, len); }, chunk_arrived[c]);
  }
  plan.run();
}

void combine_in_ring_order(const Reduction& r, int n, int owner, FunctionRef<const std::byte*(int member)> contribution,
                           std::byte* out, int64_t count) {
  if (count <= 0) return;
  if (n == 2 && (out == contribution(0) || out == contribution(1))) {
    // all_reduce on a pair receives the peer's buffer straight into `out` (builders.hpp): combine in place.
    const std::byte* first = contribution(owner + 1 == 2 ? 0 : owner + 1);
    const std::byte* last = contribution(owner);
    if (out == first) r.accumulate_wire(out, last, count);  // out = first (+) last
    else r.combine_wire_to(first, last, out, count);        // out = first (+) last, out is `last`
  } else {
    ScratchScope scratch;
    const void** chain = scratch.acquire_as<const void*>(static_cast<size_t>(n));
    for (int k = 1; k <= n; ++k) chain[k - 1] = contribution(mod(owner + k, n));
    r.combine_sources(std::span<const void* const>(chain, static_cast<size_t>(n)), out, count);
  }
  r.finish(out, count);
}

}  // namespace meshnn::ccl::detail
