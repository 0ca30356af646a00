// all_reduce: reduce_scatter then all_gather of the same family, pipelined chunk by chunk (a chunk
// of our slice starts its all_gather the moment its reduction completes), or the one-step direct
// exchange for small buffers.
#include <algorithm>
#include <cstring>

#include "builders.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"

namespace meshnn::ccl {
namespace {

// Direct on two members: the peer's whole buffer arrives straight in `out`, and each half is then
// combined in place, in the ring's order (slice j: x[j+1] (+) x[j]), so the bits are those of
// every other schedule. No staging buffer: the working set is two buffers instead of three, and
// the CMA copy leaves the peer's data in the lines the combine writes next, which cut 1-8 MiB
// all_reduces by a fifth to a third against the staged exchange (docs/design-measurements.md §4).
void all_reduce_pair_in_place(Transport& t, int tag_base, std::string_view name, double watchdog, const std::byte* src,
                              std::byte* dst, int64_t count, const Reduction& red) {
  using namespace detail;
  const Reduction r = direct_reduction(red);
  const int p = t.position(), peer = 1 - p;
  DirectExchange exchange(t, tag_base);
  exchange.send(peer, 0, src, r.compute_bytes(count));
  exchange.recv(peer, 0, dst, r.compute_bytes(count));
  exchange.post();
  exchange.wait(name, watchdog);
  for (int j = 0; j < 2; ++j) {
    const int64_t b = slice_begin(count, 2, j), e = slice_begin(count, 2, j + 1);
    if (b >= e) continue;
    std::byte* theirs = dst + r.compute_bytes(b);  // x[peer], about to be overwritten
    const std::byte* mine = src + r.compute_bytes(b);
    if (j == p) r.accumulate_wire(theirs, mine, e - b);   // x[p+1] (+) x[p] = theirs (+) mine
    else r.combine_wire_to(mine, theirs, theirs, e - b);  // x[peer+1] (+) x[peer] = mine (+) theirs
    r.finish(theirs, e - b);
  }
}

}  // namespace

void all_reduce_values(const CallContext& ctx, const void* in, void* out, int64_t count, const Reduction& red) {
  using namespace detail;
  Transport& t = ctx.transport;
  const int n = t.size(), p = t.position();
  MESHNN_CHECK(ctx.num_links >= 1 && ctx.num_links <= kMaxLinks, "all_reduce: num_links must be 1..{}, got {}",
               kMaxLinks, ctx.num_links);
  MESHNN_FATAL_IF(in == out && count > 0, "all_reduce_values: input and output must not alias");
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  if (n == 1) {
    copy_bytes(dst, src, red.compute_bytes(count));
    red.finish(dst, count);
    return;
  }
  const Schedule sched = choose_schedule(Collective::AllReduce, n, red.compute_bytes(count), ctx.topology, ctx.options);
  const int64_t chunk = chunk_elems_for(sched.chunk_bytes);
  const double watchdog = watchdog_seconds_for(ctx.options);
  const std::string_view name = ctx.op_name.empty() ? std::string_view("all_reduce") : std::string_view(ctx.op_name);
  if (sched.algorithm == Algorithm::Direct && n == 2 && chunk_count(count, chunk) <= 1) {
    all_reduce_pair_in_place(t, ctx.tag_base, name, watchdog, src, dst, count, red);
    return;
  }
  if (sched.algorithm == Algorithm::Direct && chunk_count(count, chunk) <= 1 && DirectExchange::fits(n)) {
    // The Direct case below with one chunk, without a Plan: same bytes (small ones in pieces), same
    // combination order.
    const Reduction r = direct_reduction(red);
    const size_t bytes = r.compute_bytes(count);
    ScratchScope scratch;
    std::byte* staging = scratch.acquire(bytes * (n - 1));
    auto source = [&](int q) -> const std::byte* { return q == p ? src : staging + bytes * mod(q - p - 1, n); };
    DirectExchange exchange(t, ctx.tag_base);
    for (int q = 1; q < n; ++q) {
      const int from = mod(p - q, n);
      exchange.send(mod(p + q, n), 0, src, bytes);
      exchange.recv(from, 0, const_cast<std::byte*>(source(from)), bytes);
    }
    exchange.post();
    exchange.wait(name, watchdog);
    const void* sources[DirectExchange::kMaxMembers];
    for (int j = 0; j < n; ++j) {
      const int64_t b = slice_begin(count, n, j), e = slice_begin(count, n, j + 1);
      if (b >= e) continue;
      for (int k = 1; k <= n; ++k) sources[k - 1] = source(mod(j + k, n)) + b * 4;
      r.combine_sources(std::span<const void* const>(sources, static_cast<size_t>(n)), dst + b * 4, e - b);
      r.finish(dst + b * 4, e - b);
    }
    return;
  }
  // Slice j (owned by member j in the reduce_scatter phase): elements [count*j/n, count*(j+1)/n).
  std::vector<ElemRange> slices(n);
  std::vector<ByteRange> blocks(n);
  for (int j = 0; j < n; ++j) {
    const int64_t b = slice_begin(count, n, j), e = slice_begin(count, n, j + 1);
    slices[j] = {b, e - b};
    blocks[j] = {static_cast<size_t>(b) * 4, static_cast<size_t>(e - b) * 4};
  }
  Plan plan(t, std::string(name), ctx.tag_base, watchdog);
  ScratchScope scratch;

  if (sched.algorithm == Algorithm::Direct) {
    const Reduction r = direct_reduction(red);
    Prims prims(plan, scratch, &r);
    // Step 0: the whole buffer to every peer. Then every member combines slice j in the ring's
    // order (x[j+1], ..., x[j+n-1], x[j]): identical bits on every member, and equal to Ring.
    std::byte* staging = scratch.acquire(r.compute_bytes(count) * (n - 1));
    auto source = [&](int q) -> const std::byte* {
      return q == p ? src : staging + r.compute_bytes(count) * mod(q - p - 1, n);
    };
    const int64_t nc = chunk_count(count, chunk);
    std::vector<Deps> arrived(nc);
    for (int q = 1; q < n; ++q) {
      const int to = plan.peer(q), from = plan.peer(-q);
      for (int64_t c = 0; c < nc; ++c) {
        const int64_t off = c * chunk, len = std::min(chunk, count - off);
        const int lane = lane_of(static_cast<int>(c), 0, ctx.num_links, 0);
        prims.send(to, lane, 0, src + off * 4, r.compute_bytes(len));
        arrived[c].push_back(prims.direct_recv(from, lane, 0, const_cast<std::byte*>(source(from)) + off * 4,
                                               r.compute_bytes(len)));
      }
    }
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t cb = c * chunk, ce = std::min(count, cb + chunk);
      plan.local(1, [&, cb, ce] {
        std::vector<const void*> sources(n);
        for (int j = 0; j < n; ++j) {
          const int64_t b = std::max(cb, slices[j].begin), e = std::min(ce, slices[j].begin + slices[j].count);
          if (b >= e) continue;
          for (int k = 1; k <= n; ++k) sources[k - 1] = source(mod(j + k, n)) + b * 4;
          r.combine_sources(sources, dst + b * 4, e - b);
          r.finish(dst + b * 4, e - b);
        }
      }, arrived[c]);
    }
    plan.run();
    return;
  }

  Prims prims(plan, scratch, &red, chunk, ctx.options.slots_per_lane);
  // Every peer pulls our reduced slice next; streaming it to memory spares the next call from
  // reclaiming those lines from the peers' caches (src/ccl/vector_combine.hpp).
  prims.set_result_stores(ResultStores::Streaming);
  std::byte* mine = dst + blocks[p].offset;
  std::vector<RangeOp> reduced;
  Algorithm gather = sched.algorithm;
  // Phase 1: reduce_scatter into our slice of out.
  switch (sched.algorithm) {
    case Algorithm::Line: reduced = build_reduce_line(prims, src, slices, mine, blocks[p].offset, chunk, ctx.num_links); break;
    case Algorithm::BidirectionalRing: {
      reduced = build_reduce_ring(prims, src, slices, mine, blocks[p].offset, +1, 0, 2, chunk, ctx.num_links);
      auto back = build_reduce_ring(prims, src, slices, mine, blocks[p].offset, -1, 1, 2, chunk, ctx.num_links);
      reduced.insert(reduced.end(), back.begin(), back.end());
      break;
    }
    default:
      gather = Algorithm::Ring;
      reduced = build_reduce_ring(prims, src, slices, mine, blocks[p].offset, +1, 0, 1, chunk, ctx.num_links);
      break;
  }
  // Phase 2: all_gather the reduced slices in place; each chunk waits only for its own reduction.
  build_gather_relay(prims, blocks, mine, dst, gather, ctx.options.hop_split, static_cast<size_t>(chunk) * 4,
                     ctx.num_links, 1, [&reduced](size_t offset, size_t bytes) { return ops_overlapping(reduced, offset, bytes); });
  plan.run();
}

}  // namespace meshnn::ccl
