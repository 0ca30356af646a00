// all_reduce: reduce_scatter then all_gather of the same family, pipelined chunk by chunk (a chunk
// of our slice starts its all_gather the moment its reduction completes), or the one-step direct
// exchange for small buffers.
#include <algorithm>
#include <cstring>

#include "builders.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/tensor/bfloat16.hpp"

namespace meshnn::ccl {

bool all_reduce_bfloat16_pair(const CallContext& ctx, const uint16_t* in, uint16_t* out, int64_t count,
                              const Reduction& red) {
  using namespace detail;
  Transport& t = ctx.transport;
  const int n = t.size(), p = t.position();
  if (n != 2 || count <= 0 || red.type != ElementType::F32) return false;
  const Schedule sched = choose_schedule(Collective::ALL_REDUCE, n, red.compute_bytes(count), ctx.topology,
                                         ctx.transport.kind(), ctx.options);
  if (sched.algorithm != Algorithm::DIRECT) return false;
  MESHNN_CHECK(ctx.num_links >= 1 && ctx.num_links <= kMaxLinks, "all_reduce: num_links must be 1..{}, got {}",
               kMaxLinks, ctx.num_links);
  MESHNN_FATAL_IF(in == out, "all_reduce_bfloat16_pair: input and output must not alias");
  const std::string_view name = ctx.op_name.empty() ? std::string_view("all_reduce") : std::string_view(ctx.op_name);
  const size_t bytes = static_cast<size_t>(count) * 2;
  const TracedCollective traced(name, n, bytes, sched.algorithm, static_cast<double>(bytes));
  const Reduction r = direct_reduction(red);
  // The peer's values land in `out` and are replaced block by block by the results; each block is
  // widened into float32 buffers small enough to stay in L1 while it is combined.
  constexpr int64_t kBlock = 2048;
  ScratchScope scratch;
  float* widened = scratch.acquire_as<float>(3 * kBlock);
  float* const contribution[2] = {p == 0 ? widened : widened + kBlock, p == 0 ? widened + kBlock : widened};
  float* result = widened + 2 * kBlock;
  exchange_direct(
      ctx, name, watchdog_seconds_for(ctx.options), bytes, sched.chunk_bytes,
      [in](int) { return reinterpret_cast<const std::byte*>(in); },
      [out](int) { return reinterpret_cast<std::byte*>(out); }, [] {},
      [&](size_t offset, size_t len) {
        for (int64_t b = static_cast<int64_t>(offset / 2), end = static_cast<int64_t>((offset + len) / 2); b < end;) {
          // A block never straddles the slice boundary: each slice has its own order of combine.
          const int owner = b < slice_begin(count, n, 1) ? 0 : 1;
          const int64_t e = std::min({end, b + kBlock, owner == 0 ? slice_begin(count, n, 1) : count});
          const auto m = static_cast<size_t>(e - b);
          bfloat16_to_float(std::span(in + b, m), std::span(contribution[p], m));
          bfloat16_to_float(std::span<const uint16_t>(out + b, m), std::span(contribution[1 - p], m));
          combine_in_ring_order(
              r, n, owner, [&](int member) { return reinterpret_cast<const std::byte*>(contribution[member]); },
              reinterpret_cast<std::byte*>(result), e - b);
          float_to_bfloat16(std::span<const float>(result, m), std::span(out + b, m));
          b = e;
        }
      });
  return true;
}

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
  const Schedule sched = choose_schedule(Collective::ALL_REDUCE, n, red.compute_bytes(count), ctx.topology,
                                         ctx.transport.kind(), ctx.options);
  const int64_t chunk = chunk_elems_for(sched.chunk_bytes);
  const double watchdog = watchdog_seconds_for(ctx.options);
  const std::string_view name = ctx.op_name.empty() ? std::string_view("all_reduce") : std::string_view(ctx.op_name);
  const TracedCollective traced(name, n, red.compute_bytes(count), sched.algorithm,
                                2.0 * static_cast<double>(red.compute_bytes(count)) * (n - 1) / n);
  if (sched.algorithm == Algorithm::DIRECT) {
    // The whole buffer to every peer; then every member combines each slice j in the ring's order,
    // so all members hold the same bits, and those of Ring. On two members the peer's buffer lands
    // straight in `out` and is combined there: two buffers in the working set instead of three,
    // and the copy leaves the peer's data in the lines the combine writes next (1-8 MiB: a fifth
    // to a third faster than staging it; docs/design-measurements.md §4).
    const Reduction r = direct_reduction(red);
    const size_t bytes = r.compute_bytes(count);
    ScratchScope scratch;
    std::byte* staging = n == 2 ? dst : scratch.acquire(bytes * (n - 1));
    auto incoming = [&](int from) { return staging + bytes * mod(from - p - 1, n); };
    exchange_direct(
        ctx, name, watchdog, bytes, static_cast<size_t>(chunk) * 4, [src](int) { return src; }, incoming, [] {},
        [&](size_t offset, size_t len) {
          const int64_t first = static_cast<int64_t>(offset / 4), last = static_cast<int64_t>((offset + len) / 4);
          for (int j = 0; j < n; ++j) {
            const int64_t b = std::max(first, slice_begin(count, n, j)), e = std::min(last, slice_begin(count, n, j + 1));
            if (b >= e) continue;
            combine_in_ring_order(
                r, n, j, [&](int m) -> const std::byte* { return (m == p ? src : incoming(m)) + b * 4; }, dst + b * 4,
                e - b);
          }
        });
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

  Prims prims(plan, scratch, &red, chunk, ctx.options.slots_per_lane);
  // Every peer pulls our reduced slice next; streaming it to memory spares the next call from
  // reclaiming those lines from the peers' caches (src/ccl/vector_combine.hpp).
  prims.set_result_stores(ResultStores::STREAMING);
  std::byte* mine = dst + blocks[p].offset;
  std::vector<RangeOp> reduced;
  Algorithm gather = sched.algorithm;
  // Phase 1: reduce_scatter into our slice of out.
  switch (sched.algorithm) {
    case Algorithm::LINE: reduced = build_reduce_line(prims, src, slices, mine, blocks[p].offset, chunk, ctx.num_links); break;
    case Algorithm::BIDIRECTIONAL_RING: {
      reduced = build_reduce_ring(prims, src, slices, mine, blocks[p].offset, +1, 0, 2, chunk, ctx.num_links);
      auto back = build_reduce_ring(prims, src, slices, mine, blocks[p].offset, -1, 1, 2, chunk, ctx.num_links);
      reduced.insert(reduced.end(), back.begin(), back.end());
      break;
    }
    default:
      gather = Algorithm::RING;
      reduced = build_reduce_ring(prims, src, slices, mine, blocks[p].offset, +1, 0, 1, chunk, ctx.num_links);
      break;
  }
  // Phase 2: all_gather the reduced slices in place; each chunk waits only for its own reduction.
  build_gather_relay(prims, blocks, mine, dst, gather, ctx.options.hop_split, static_cast<size_t>(chunk) * 4,
                     ctx.num_links, 1, [&reduced](size_t offset, size_t bytes) { return ops_overlapping(reduced, offset, bytes); });
  plan.run();
}

}  // namespace meshnn::ccl
