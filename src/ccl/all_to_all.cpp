// all_to_all on plain buffers: the Direct exchange (direct.cpp) with a different block for every
// peer. Nothing is relayed, so there is no ring variant: each block travels its one hop.
#include "builders.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"

namespace meshnn::ccl {

void all_to_all_bytes(const CallContext& ctx, const void* in, size_t block_bytes, void* out) {
  using namespace detail;
  Transport& t = ctx.transport;
  const int n = t.size(), p = t.position();
  MESHNN_CHECK(ctx.num_links >= 1 && ctx.num_links <= kMaxLinks, "all_to_all: num_links must be 1..{}, got {}",
               kMaxLinks, ctx.num_links);
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  const Schedule sched =
      choose_schedule(Collective::ALL_TO_ALL, n, block_bytes, ctx.topology, ctx.transport.kind(), ctx.options);
  const std::string_view name = ctx.op_name.empty() ? std::string_view("all_to_all") : std::string_view(ctx.op_name);
  const TracedCollective traced(name, n, block_bytes * n, sched.algorithm, static_cast<double>(block_bytes) * (n - 1));
  auto block = [block_bytes](auto* base, int j) { return base + static_cast<size_t>(j) * block_bytes; };
  exchange_direct(
      ctx, name, watchdog_seconds_for(ctx.options), block_bytes, sched.chunk_bytes,
      [&](int to) { return block(src, to); }, [&](int from) { return block(dst, from); },
      // Our own block stays here: copied while the others travel.
      [&] { copy_bytes(block(dst, p), block(src, p), block_bytes); }, [](size_t, size_t) {});
}

}  // namespace meshnn::ccl
