// all_gather schedules: relay (ring, bidirectional ring, line) and direct (direct.cpp).
#include <algorithm>
#include <cstring>
#include <functional>

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
    case Algorithm::LINE: fwd = n - 1 - o; break;  // no wrap: o+1..n-1 ahead, 0..o-1 behind
    case Algorithm::BIDIRECTIONAL_RING:
      if (split == HopSplit::PARITY_SWAP) {
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

// One member's part of a relayed all_gather. Blocks travel hop by hop in one or both directions,
// cut into parts (the farthest member's block in halves, one each way) and chunks; a chunk that
// arrives is received straight into its place in `out` and sent on from there, so receive, copy
// and send are one (NCCL's directRecvCopySend).
class GatherRelay {
 public:
  GatherRelay(Prims& prims, std::span<const ByteRange> blocks, const std::byte* mine, std::byte* out,
              Algorithm algorithm, HopSplit split, size_t chunk_bytes, int num_links, int phase, const ReadyFn& ready)
      : prims_(prims), plan_(prims.plan()), blocks_(blocks), mine_(mine), out_(out), algorithm_(algorithm),
        split_(split), chunk_bytes_(chunk_bytes), num_links_(num_links), phase_(phase), ready_(ready),
        n_(plan_.size()), p_(plan_.position()),
        parts_(algorithm == Algorithm::BIDIRECTIONAL_RING && split == HopSplit::SPLIT_FARTHEST && n_ % 2 == 0 ? 2 : 1),
        received_(n_, std::vector<std::vector<OpId>>(parts_)), last_step_(n_, -1) {}

  int max_hops() const {
    int most = 0;
    for (int o = 0; o < n_; ++o)
      for (int part = 0; part < parts_; ++part)
        for (int dir = 0; dir < 2; ++dir) most = std::max(most, hops(algorithm_, split_, n_, o, part, dir));
    return most;
  }
  size_t max_chunks() const {
    size_t most = 0;
    for (int o = 0; o < n_; ++o)
      for (int part = 0; part < parts_; ++part) most = std::max(most, chunk_count(part_range(o, part).bytes, chunk_bytes_));
    return most;
  }
  int parts() const { return parts_; }

  // Our own block into its place in out, unless it is there already.
  // Returns the copy, or -1 when there is none.
  OpId place_own_block() {
    if (mine_ == out_ + blocks_[p_].offset) return -1;
    return plan_.local(0, [out = out_ + blocks_[p_].offset, mine = mine_, bytes = blocks_[p_].bytes] {
      copy_bytes(out, mine, bytes);
    });
  }

  // Step s, direction dir: send on the chunk that arrived at step s-1 (at step 0: our own, once
  // whatever `ready` names is done).
  void pass_on(size_t c, int s, int dir, int part) {
    const int d = dir == 0 ? 1 : -1, origin = mod(p_ - d * s, n_);
    size_t off = 0, len = 0;
    if (!travels(origin, part, dir, s, c, off, len)) return;
    const int to = plan_.peer(d), lane = lane_of(static_cast<int>(c), dir, num_links_, phase_);
    if (s == 0) prims_.send(to, lane, s, mine_ + off, len, ready_ ? ready_(blocks_[p_].offset + off, len) : Deps{});
    else prims_.send(to, lane, s, out_ + blocks_[origin].offset + off, len, {received_[origin][part][c]});
  }

  // Step s, direction dir: the chunk the member behind passes on lands in its place in out.
  void receive(size_t c, int s, int dir, int part) {
    const int d = dir == 0 ? 1 : -1, origin = mod(p_ - d * (s + 1), n_);
    size_t off = 0, len = 0;
    if (!travels(origin, part, dir, s, c, off, len)) return;
    const int from = plan_.peer(-d), lane = lane_of(static_cast<int>(c), dir, num_links_, phase_);
    auto& arrivals = received_[origin][part];
    if (arrivals.size() <= c) arrivals.resize(c + 1, -1);
    arrivals[c] = prims_.direct_recv(from, lane, s, out_ + blocks_[origin].offset + off, len);
    last_step_[origin] = std::max(last_step_[origin], s);
  }

  // Every receive of origin o's block: once they are done the block is whole in out.
  Deps block_arrivals(int o) const {
    Deps all;
    for (const auto& part : received_[o])
      for (OpId op : part)
        if (op >= 0) all.push_back(op);
    return all;
  }
  // Our own block first, then the others by the step their last chunk arrives at (ties: the
  // nearest member behind on the ring first): the order blocks complete in, fixed by the schedule.
  std::vector<int> completion_order() const {
    std::vector<int> order;
    for (int k = 0; k < n_; ++k) order.push_back(mod(p_ - k, n_));
    std::stable_sort(order.begin() + 1, order.end(), [&](int x, int y) { return last_step_[x] < last_step_[y]; });
    return order;
  }

 private:
  // The byte range of part `part` of origin o's block (halves cut on a 64-byte line).
  ByteRange part_range(int o, int part) const {
    const size_t b = blocks_[o].bytes, half = std::min(b, (b / 2 + 63) / 64 * 64);
    if (parts_ == 1) return ByteRange{0, b};
    return part == 0 ? ByteRange{0, half} : ByteRange{half, b - half};
  }
  // Whether chunk c of the part still travels at step s in direction dir; its byte range if so.
  bool travels(int origin, int part, int dir, int s, size_t c, size_t& off, size_t& len) const {
    const ByteRange r = part_range(origin, part);
    if (s >= hops(algorithm_, split_, n_, origin, part, dir) || c >= chunk_count(r.bytes, chunk_bytes_)) return false;
    off = r.offset + c * chunk_bytes_;
    len = std::min(chunk_bytes_, r.bytes - c * chunk_bytes_);
    return true;
  }

  Prims& prims_;
  Plan& plan_;
  std::span<const ByteRange> blocks_;
  const std::byte* mine_;
  std::byte* out_;
  Algorithm algorithm_;
  HopSplit split_;
  size_t chunk_bytes_;
  int num_links_, phase_;
  const ReadyFn& ready_;
  int n_, p_, parts_;
  std::vector<std::vector<std::vector<OpId>>> received_;  // [origin][part][chunk]: the receive a send-on waits for
  std::vector<int> last_step_;  // [origin]: the step its last chunk arrives at
};

}  // namespace

void build_gather_relay(Prims& prims, std::span<const ByteRange> blocks, const std::byte* mine, std::byte* out,
                        Algorithm algorithm, HopSplit split, size_t chunk_bytes, int num_links, int phase,
                        const ReadyFn& ready, const BlockFn& on_block) {
  GatherRelay relay(prims, blocks, mine, out, algorithm, split, chunk_bytes, num_links, phase, ready);
  const OpId own_placed = relay.place_own_block();
  // Chunk-major, as NCCL: a lane's messages go out in (chunk, step) order on every member, so each
  // member's k-th send on a lane is its neighbour's k-th receive, and chunk c+1 enters the ring
  // right behind chunk c (a systolic pipeline, every link busy every step).
  const int steps = relay.max_hops();
  for (size_t c = 0, chunks = relay.max_chunks(); c < chunks; ++c)
    for (int s = 0; s < steps; ++s)
      for (int dir = 0; dir < 2; ++dir)
        for (int part = 0; part < relay.parts(); ++part) {
          relay.pass_on(c, s, dir, part);
          relay.receive(c, s, dir, part);
        }
  if (!on_block) return;
  // The consumer's calls, one per block as it completes, chained so that they run one after
  // another in completion order whatever the timing (their results do not depend on it).
  const int me = prims.plan().position();
  OpId previous = -1;
  for (int o : relay.completion_order()) {
    Deps after = o == me ? Deps{} : relay.block_arrivals(o);
    if (o == me && own_placed >= 0) after.push_back(own_placed);
    if (previous >= 0) after.push_back(previous);
    previous = prims.plan().local(steps, [&on_block, o] { on_block(o); }, after);
  }
}

}  // namespace detail

namespace {

void gather(const CallContext& ctx, const void* mine, size_t bytes, void* out, const detail::BlockFn& on_block) {
  using namespace detail;
  Transport& t = ctx.transport;
  const int n = t.size();
  MESHNN_CHECK(ctx.num_links >= 1 && ctx.num_links <= kMaxLinks, "all_gather: num_links must be 1..{}, got {}",
               kMaxLinks, ctx.num_links);
  auto* dst = static_cast<std::byte*>(out);
  const auto* src = static_cast<const std::byte*>(mine);
  const Schedule sched =
      choose_schedule(Collective::ALL_GATHER, n, bytes, ctx.topology, ctx.transport.kind(), ctx.options);
  const double watchdog = watchdog_seconds_for(ctx.options);
  const std::string_view name = ctx.op_name.empty() ? std::string_view("all_gather") : std::string_view(ctx.op_name);
  const TracedCollective traced(name, n, bytes, sched.algorithm, static_cast<double>(bytes) * (n - 1));
  if (sched.algorithm == Algorithm::DIRECT) {
    const int p = t.position();
    std::byte* own = dst + static_cast<size_t>(p) * bytes;
    exchange_direct(
        ctx, name, watchdog, bytes, sched.chunk_bytes, [src](int) { return src; },
        [dst, bytes](int from) { return dst + static_cast<size_t>(from) * bytes; },
        [&] {
          if (src != own) copy_bytes(own, src, bytes);
          if (on_block) on_block(p);  // ours while the others travel
        },
        [](size_t, size_t) {});
    // Every peer's block arrives in the one step: in ring order, as the relay would complete them.
    if (on_block)
      for (int k = 1; k < n; ++k) on_block(mod(p - k, n));
    return;
  }
  std::vector<ByteRange> blocks(n);
  for (int j = 0; j < n; ++j) blocks[j] = {static_cast<size_t>(j) * bytes, bytes};
  Plan plan(t, std::string(name), ctx.tag_base, watchdog);
  ScratchScope scratch;
  Prims prims(plan, scratch);
  build_gather_relay(prims, blocks, src, dst, sched.algorithm, ctx.options.hop_split, sched.chunk_bytes, ctx.num_links,
                     0, {}, on_block);
  plan.run();
}

}  // namespace

void all_gather_bytes(const CallContext& ctx, const void* mine, size_t bytes, void* out) {
  gather(ctx, mine, bytes, out, {});
}

void all_gather_bytes_each(const CallContext& ctx, const void* mine, size_t bytes, void* out,
                           const std::function<void(int member)>& on_block) {
  MESHNN_CHECK(on_block, "all_gather_bytes_each needs a block consumer");
  gather(ctx, mine, bytes, out, on_block);
}

}  // namespace meshnn::ccl
