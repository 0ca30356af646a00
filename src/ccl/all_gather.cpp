// all_gather schedules: relay (ring, bidirectional ring, line) and direct (direct.cpp).
#include <algorithm>
#include <cstring>

#include "builders.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"

namespace meshnn::ccl {
namespace detail {
namespace {

// Hops part `part` of origin o's block travels in direction dir (0 forward to position+1, 1
// backward). Forward and backward hops of every part add up to n-1, so each other member receives
// every byte exactly once.
int hops(Algorithm algorithm, HopSplit split, int n, int o, int part, int dir) {
  int fwd = n - 1;
  switch (algorithm) {
    case Algorithm::Line: fwd = n - 1 - o; break;  // no wrap: o+1..n-1 ahead, 0..o-1 behind
    case Algorithm::BidirectionalRing:
      if (split == HopSplit::ParitySwap) {
        fwd = n / 2;
        if (o % 2 == 0) fwd = n - 1 - fwd;
      } else if (n % 2 == 1) {
        fwd = (n - 1) / 2;
      } else {
        fwd = part == 0 ? n / 2 : n / 2 - 1;  // the farthest member: first half ahead, second behind
      }
      break;
    default: break;
  }
  return dir == 0 ? fwd : n - 1 - fwd;
}

}  // namespace

void build_gather_relay(Prims& prims, std::span<const ByteRange> blocks, const std::byte* mine, std::byte* out,
                        Algorithm algorithm, HopSplit split, size_t chunk_bytes, int num_links, int phase,
                        const ReadyFn& ready) {
  Plan& plan = prims.plan();
  const int n = plan.size(), p = plan.position();
  const int parts = algorithm == Algorithm::BidirectionalRing && split == HopSplit::SplitFarthest && n % 2 == 0 ? 2 : 1;
  auto part_range = [&](int o, int part) {
    const size_t b = blocks[o].bytes, half = std::min(b, (b / 2 + 63) / 64 * 64);
    if (parts == 1) return ByteRange{0, b};
    return part == 0 ? ByteRange{0, half} : ByteRange{half, b - half};
  };
  // received[o][part][chunk]: the receive a forwarding send waits for.
  std::vector<std::vector<std::vector<OpId>>> received(n, std::vector<std::vector<OpId>>(parts));
  int max_hops = 0;
  for (int o = 0; o < n; ++o)
    for (int part = 0; part < parts; ++part)
      for (int dir = 0; dir < 2; ++dir) max_hops = std::max(max_hops, hops(algorithm, split, n, o, part, dir));

  if (mine != out + blocks[p].offset) {
    plan.local(0, [=] { copy_bytes(out + blocks[p].offset, mine, blocks[p].bytes); });
  }
  size_t max_chunks = 0;
  for (int o = 0; o < n; ++o)
    for (int part = 0; part < parts; ++part) max_chunks = std::max(max_chunks, chunk_count(part_range(o, part).bytes, chunk_bytes));
  // Chunk-major, as NCCL: a lane's messages go out in (chunk, step) order on every member, so each
  // member's k-th send on a lane is its neighbour's k-th receive, and chunk c+1 enters the ring
  // right behind chunk c (a systolic pipeline, every link busy every step).
  for (size_t c = 0; c < max_chunks; ++c) {
    for (int s = 0; s < max_hops; ++s) {
      for (int dir = 0; dir < 2; ++dir) {
        const int d = dir == 0 ? 1 : -1;
        const int to = plan.peer(d), from = plan.peer(-d);
        const int lane = lane_of(static_cast<int>(c), dir, num_links, phase);
        const int o_send = mod(p - d * s, n), o_recv = mod(p - d * (s + 1), n);
        for (int part = 0; part < parts; ++part) {
          // Step s: pass on the chunk that arrived at step s-1 (step 0: our own).
          const ByteRange rs = part_range(o_send, part);
          if (s < hops(algorithm, split, n, o_send, part, dir) && c < chunk_count(rs.bytes, chunk_bytes)) {
            const size_t off = rs.offset + c * chunk_bytes, len = std::min(chunk_bytes, rs.bytes - c * chunk_bytes);
            if (s == 0) {
              prims.send(to, lane, s, mine + off, len, ready ? ready(blocks[p].offset + off, len) : Deps{});
            } else {
              prims.send(to, lane, s, out + blocks[o_send].offset + off, len, {received[o_send][part][c]});
            }
          }
          const ByteRange rr = part_range(o_recv, part);
          if (s < hops(algorithm, split, n, o_recv, part, dir) && c < chunk_count(rr.bytes, chunk_bytes)) {
            const size_t off = rr.offset + c * chunk_bytes, len = std::min(chunk_bytes, rr.bytes - c * chunk_bytes);
            auto& got = received[o_recv][part];
            if (got.size() <= c) got.resize(c + 1, -1);
            got[c] = prims.direct_recv(from, lane, s, out + blocks[o_recv].offset + off, len);
          }
        }
      }
    }
  }
}

}  // namespace detail

void all_gather_bytes(const CallContext& ctx, const void* mine, size_t bytes, void* out) {
  using namespace detail;
  Transport& t = ctx.transport;
  const int n = t.size();
  MESHNN_CHECK(ctx.num_links >= 1 && ctx.num_links <= kMaxLinks, "all_gather: num_links must be 1..{}, got {}",
               kMaxLinks, ctx.num_links);
  auto* dst = static_cast<std::byte*>(out);
  const auto* src = static_cast<const std::byte*>(mine);
  const Schedule sched = choose_schedule(Collective::AllGather, n, bytes, ctx.topology, ctx.options);
  const double watchdog = watchdog_seconds_for(ctx.options);
  const std::string_view name = ctx.op_name.empty() ? std::string_view("all_gather") : std::string_view(ctx.op_name);
  if (sched.algorithm == Algorithm::Direct) {
    std::byte* own = dst + static_cast<size_t>(t.position()) * bytes;
    exchange_direct(
        ctx, name, watchdog, bytes, sched.chunk_bytes, [src](int) { return src; },
        [dst, bytes](int from) { return dst + static_cast<size_t>(from) * bytes; },
        [&] {
          if (src != own) copy_bytes(own, src, bytes);
        },
        [](size_t, size_t) {});
    return;
  }
  std::vector<ByteRange> blocks(n);
  for (int j = 0; j < n; ++j) blocks[j] = {static_cast<size_t>(j) * bytes, bytes};
  Plan plan(t, std::string(name), ctx.tag_base, watchdog);
  ScratchScope scratch;
  Prims prims(plan, scratch);
  build_gather_relay(prims, blocks, src, dst, sched.algorithm, ctx.options.hop_split, sched.chunk_bytes, ctx.num_links,
                     0, {});
  plan.run();
}

}  // namespace meshnn::ccl
