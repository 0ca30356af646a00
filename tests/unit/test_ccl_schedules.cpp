// Every ccl schedule over the in-process transport, 1..16 virtual ranks, against a direct
// computation element by element (and bit by bit where the reduction order is documented).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/ccl/plan.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/tensor/bfloat16.hpp"

namespace meshnn::ccl {
namespace {

constexpr TransportKind kShm = TransportKind::SHARED_MEMORY;
constexpr TransportKind kNet = TransportKind::NETWORK;

struct Variant {
  Algorithm algorithm;
  HopSplit split = HopSplit::SPLIT_FARTHEST;
  Topology topology = Topology::RING;
  const char* name;
};
const Variant kVariants[] = {
    {Algorithm::RING, HopSplit::SPLIT_FARTHEST, Topology::RING, "ring"},
    {Algorithm::BIDIRECTIONAL_RING, HopSplit::SPLIT_FARTHEST, Topology::RING, "bidirectional/split_farthest"},
    {Algorithm::BIDIRECTIONAL_RING, HopSplit::PARITY_SWAP, Topology::RING, "bidirectional/parity_swap"},
    {Algorithm::LINE, HopSplit::SPLIT_FARTHEST, Topology::LINEAR, "line"},
    {Algorithm::DIRECT, HopSplit::SPLIT_FARTHEST, Topology::RING, "direct"},
};

CclOptions options_for(const Variant& v, size_t chunk_bytes) {
  CclOptions o;
  o.algorithm = v.algorithm;
  o.hop_split = v.split;
  o.chunk_bytes = chunk_bytes;
  o.watchdog_seconds = 60;
  return o;
}

// Small integers: every partial sum is exact in float32 (and in bfloat16), so any order must give
// exactly the direct result.
float int_value(int member, int64_t i) { return static_cast<float>((member * 131 + i * 7) % 17 - 8); }
// Arbitrary floats for order-sensitive checks.
float real_value(int member, int64_t i) {
  uint64_t h = (static_cast<uint64_t>(member) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(i) * 0xC2B2AE3D27D4EB4Full);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<double>(h % 2000001) / 1000000.0 - 1.0) * 3.7f;
}

TEST(CclAllGather, EveryScheduleEveryGroupSize) {
  for (const Variant& v : kVariants) {
    for (int n = 1; n <= 16; ++n) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{5000}}) {
        for (int links : {1, 3}) {
          std::atomic<int> bad{0};
          InProcessFabric::run(n, [&](Transport& t) {
            std::vector<uint8_t> mine(bytes), out(bytes * n, 0xEE);
            for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<uint8_t>(t.position() * 37 + i);
            CallContext ctx{t, 0, v.topology, links, options_for(v, 256), ""};
            all_gather_bytes(ctx, mine.data(), bytes, out.data());
            for (int j = 0; j < n; ++j)
              for (size_t i = 0; i < bytes; ++i)
                if (out[j * bytes + i] != static_cast<uint8_t>(j * 37 + i)) ++bad;
          });
          EXPECT_EQ(bad.load(), 0) << v.name << " n=" << n << " bytes=" << bytes << " links=" << links;
        }
      }
    }
  }
}

TEST(CclAllGather, OwnBlockAlreadyInPlace) {
  InProcessFabric::run(5, [&](Transport& t) {
    const size_t bytes = 333;
    std::vector<uint8_t> out(bytes * 5, 0);
    for (size_t i = 0; i < bytes; ++i) out[t.position() * bytes + i] = static_cast<uint8_t>(t.position() + i);
    CallContext ctx{t, 0, Topology::RING, 1, options_for(kVariants[1], 64), ""};
    all_gather_bytes(ctx, out.data() + t.position() * bytes, bytes, out.data());
    for (int j = 0; j < 5; ++j)
      for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(out[j * bytes + i], static_cast<uint8_t>(j + i));
  });
}

// Byte i of the block member `from` sends member `to`: differs with all three.
uint8_t exchanged_byte(int from, int to, size_t i) {
  return static_cast<uint8_t>(from * 37 + to * 101 + i * 7 + (i >> 8));
}

// Every block size from empty to chunked (through the Plan, 256-byte chunks over one or three
// links) and whole (one message per peer), every group size: out block j is what j sent us.
TEST(CclAllToAll, EveryGroupSizeAndBlockSize) {
  for (int n = 1; n <= 16; ++n) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{333}, size_t{5000}}) {
      for (size_t chunk : {size_t{0}, size_t{256}}) {
        for (int links : {1, 3}) {
          std::atomic<int> bad{0};
          InProcessFabric::run(n, [&](Transport& t) {
            const int p = t.position();
            std::vector<uint8_t> in(bytes * n), out(bytes * n, 0xEE);
            for (int j = 0; j < n; ++j)
              for (size_t i = 0; i < bytes; ++i) in[j * bytes + i] = exchanged_byte(p, j, i);
            CclOptions o;
            o.chunk_bytes = chunk;
            o.watchdog_seconds = 60;
            CallContext ctx{t, 0, Topology::RING, links, o, ""};
            all_to_all_bytes(ctx, in.data(), bytes, out.data());
            for (int j = 0; j < n; ++j)
              for (size_t i = 0; i < bytes; ++i) bad += out[j * bytes + i] != exchanged_byte(j, p, i);
          });
          EXPECT_EQ(bad.load(), 0) << "n=" << n << " bytes=" << bytes << " chunk=" << chunk << " links=" << links;
        }
      }
    }
  }
}

// Blocks above the default 1 MiB chunk: several chunks per peer by default (one message on two
// members), whatever algorithm the options name (all_to_all has only the direct schedule).
TEST(CclAllToAll, LargeBlocksChunkByDefault) {
  const size_t bytes = (size_t{5} << 20) / 4 + 3;
  for (int n : {2, 3, 5}) {
    const Schedule s = choose_schedule(Collective::ALL_TO_ALL, n, bytes, Topology::RING, kShm, CclOptions{});
    EXPECT_EQ(s.algorithm, Algorithm::DIRECT);
    EXPECT_EQ(s.chunk_bytes >= bytes, n == 2) << "n=" << n;
    std::atomic<int> bad{0};
    InProcessFabric::run(n, [&](Transport& t) {
      const int p = t.position();
      std::vector<uint8_t> in(bytes * n), out(bytes * n);
      for (int j = 0; j < n; ++j)
        for (size_t i = 0; i < bytes; ++i) in[j * bytes + i] = exchanged_byte(p, j, i);
      CclOptions o;
      o.algorithm = Algorithm::RING;
      CallContext ctx{t, 0, Topology::RING, 2, o, ""};
      all_to_all_bytes(ctx, in.data(), bytes, out.data());
      for (int j = 0; j < n; ++j)
        for (size_t i = 0; i < bytes; ++i) bad += out[j * bytes + i] != exchanged_byte(j, p, i);
    });
    EXPECT_EQ(bad.load(), 0) << "n=" << n;
  }
}

// What the watchdog reports when position 0 of two runs `call` (with a 0.3 s watchdog) and
// position 1 never joins.
std::string stuck_report(const std::function<void(const CallContext&)>& call, size_t chunk_bytes = 0) {
  std::mutex m;
  std::string report;
  set_stuck_handler([](const std::string& message) { throw Error(message); });
  try {
    InProcessFabric::run(2, [&](Transport& t) {
      if (t.position() == 1) return;  // never joins the collective
      CclOptions o;
      o.watchdog_seconds = 0.3;
      o.chunk_bytes = chunk_bytes;
      try {
        call(CallContext{t, 0, Topology::RING, 1, o, ""});
      } catch (const Error& e) {
        std::lock_guard lock(m);
        report = e.what();
      }
    });
  } catch (...) {
  }
  set_stuck_handler({});
  return report;
}

// A peer that never joins: the watchdog names the collective and the peer, whether the blocks go
// as one message each (no Plan) or in chunks (through the Plan).
TEST(CclAllToAll, WatchdogReportsTheMissingPeer) {
  for (size_t chunk : {size_t{0}, size_t{1024}}) {
    const std::string report = stuck_report(
        [](const CallContext& ctx) {
          std::vector<uint8_t> in(2 * 4096), out(2 * 4096);
          all_to_all_bytes(ctx, in.data(), 4096, out.data());
        },
        chunk);
    EXPECT_NE(report.find("all_to_all stuck at step 0 waiting for peer virtual rank 1"), std::string::npos)
        << "chunk " << chunk << ": " << report;
  }
}

// Byte i of a broadcast from `root`.
uint8_t broadcast_byte(int root, size_t i) { return static_cast<uint8_t>(root * 53 + i * 11 + (i >> 8) + 1); }

// Bytes of this member's buffer that differ from the root's after a broadcast of `bytes` from
// `root` (the others' buffers start as `fill`).
int broadcast_errors(const CallContext& ctx, int root, size_t bytes, uint8_t fill) {
  std::vector<uint8_t> buf(bytes, fill);
  if (ctx.transport.position() == root)
    for (size_t i = 0; i < bytes; ++i) buf[i] = broadcast_byte(root, i);
  broadcast_bytes(ctx, root, buf.data(), bytes);
  int bad = 0;
  for (size_t i = 0; i < bytes; ++i) bad += buf[i] != broadcast_byte(root, i);
  return bad;
}

// Every schedule, group size 1..16, every root, empty to many-chunk buffers over one or three
// links: every member ends with the root's bytes, and the root's buffer is untouched.
TEST(CclBroadcast, EveryScheduleEveryGroupSizeEveryRoot) {
  for (const Variant& v : kVariants) {
    if (v.split == HopSplit::PARITY_SWAP) continue;  // an all_gather split: broadcast has no parts
    for (int n = 1; n <= 16; ++n) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, size_t{5000}}) {
        for (int links : {1, 3}) {
          std::atomic<int> bad{0};
          for (int root = 0; root < n; ++root) {
            InProcessFabric::run(n, [&](Transport& t) {
              bad += broadcast_errors(CallContext{t, 0, v.topology, links, options_for(v, 256), ""}, root, bytes, 0xEE);
            });
          }
          EXPECT_EQ(bad.load(), 0) << v.name << " n=" << n << " bytes=" << bytes << " links=" << links;
        }
      }
    }
  }
}

// AUTO (direct below 16 KiB, two chains above) with the default and odd chunk sizes, every root.
TEST(CclBroadcast, AutoScheduleAndChunkings) {
  for (int n : {2, 3, 5, 8}) {
    for (size_t bytes : {size_t{64}, size_t{20000}, size_t{100003}}) {
      for (size_t chunk : {size_t{0}, size_t{64}, size_t{4096}, size_t{65536}}) {
        std::atomic<int> bad{0};
        for (int root = 0; root < n; ++root) {
          InProcessFabric::run(n, [&](Transport& t) {
            CclOptions o;
            o.chunk_bytes = chunk;
            o.watchdog_seconds = 60;
            bad += broadcast_errors(CallContext{t, 0, Topology::RING, 1, o, ""}, root, bytes, 0);
          });
        }
        EXPECT_EQ(bad.load(), 0) << "n=" << n << " bytes=" << bytes << " chunk=" << chunk;
      }
    }
  }
  EXPECT_EQ(choose_schedule(Collective::BROADCAST, 8, 1 << 20, Topology::RING, kShm, CclOptions{}).algorithm,
            Algorithm::BIDIRECTIONAL_RING);
  EXPECT_EQ(choose_schedule(Collective::BROADCAST, 8, 1024, Topology::RING, kShm, CclOptions{}).algorithm,
            Algorithm::DIRECT);
  EXPECT_EQ(choose_schedule(Collective::BROADCAST, 8, 1 << 20, Topology::LINEAR, kShm, CclOptions{}).algorithm,
            Algorithm::LINE);
}

// broadcast_bytes_each: one call per chunk, in offset order, covering the buffer, each chunk
// already in place when it is handed over; on every member, the root included.
TEST(CclBroadcast, EachChunkInOrderOnceInPlace) {
  for (const Variant& v : kVariants) {
    if (v.split == HopSplit::PARITY_SWAP) continue;
    for (int n : {1, 4, 7}) {
      const size_t bytes = 3000, chunk = 512;
      std::atomic<int> bad{0};
      for (int root = 0; root < n; ++root) {
        InProcessFabric::run(n, [&](Transport& t) {
          std::vector<uint8_t> buf(bytes, 0);
          if (t.position() == root)
            for (size_t i = 0; i < bytes; ++i) buf[i] = broadcast_byte(root, i);
          size_t next = 0;
          CallContext ctx{t, 0, v.topology, 2, options_for(v, chunk), ""};
          broadcast_bytes_each(ctx, root, buf.data(), bytes, [&](size_t offset, size_t len) {
            bad += offset != next || len != std::min(chunk, bytes - offset);
            for (size_t i = offset; i < offset + len; ++i) bad += buf[i] != broadcast_byte(root, i);
            next = offset + len;
          });
          bad += next != bytes;
        });
      }
      EXPECT_EQ(bad.load(), 0) << v.name << " n=" << n;
    }
  }
}

// A peer that never joins a broadcast: the watchdog names it.
TEST(CclBroadcast, WatchdogReportsTheMissingPeer) {
  const std::string report = stuck_report([](const CallContext& ctx) {
    std::vector<uint8_t> buf(4096);
    broadcast_bytes(ctx, 1, buf.data(), buf.size());
  });
  EXPECT_NE(report.find("broadcast stuck at step 0 waiting for peer virtual rank 1"), std::string::npos) << report;
}

// The documented order of each schedule, evaluated directly: element e of slice j.
float chain_sum(const Variant& v, int n, int j, int64_t e, int64_t slice_count, bool first_half,
                float (*value)(int, int64_t), int64_t global_index) {
  auto x = [&](int m) { return value(((m % n) + n) % n, global_index); };
  float acc;
  switch (v.algorithm) {
    case Algorithm::LINE: {
      // ((x0 + ... + x[j-1]) + x[j]) + (x[n-1] + ... + x[j+1])
      float left = 0;
      for (int m = 0; m < j; ++m) left = m == 0 ? x(0) : left + x(m);
      acc = j == 0 ? x(0) : left + x(j);
      if (j < n - 1) {
        float right = x(n - 1);
        for (int m = n - 2; m > j; --m) right = right + x(m);
        acc = acc + right;
      }
      return acc;
    }
    case Algorithm::BIDIRECTIONAL_RING:
      if (!first_half) {
        acc = x(j - 1);
        for (int k = 2; k < n; ++k) acc = acc + x(j - k);
        return n == 1 ? x(j) : acc + x(j);
      }
      [[fallthrough]];
    default:
      if (n == 1) return x(j);
      acc = x(j + 1);
      for (int k = 2; k < n; ++k) acc = acc + x(j + k);
      return acc + x(j);
  }
  (void)e;
  (void)slice_count;
}

TEST(CclReduceScatter, EveryScheduleEveryGroupSizeExactIntegers) {
  for (const Variant& v : kVariants) {
    for (int n = 1; n <= 16; ++n) {
      for (int64_t count : {int64_t{1}, int64_t{37}, int64_t{1000}}) {
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN, ReduceOp::MEAN}) {
          for (bool bf16 : {false, true}) {
            if (bf16 && op != ReduceOp::SUM) continue;
            std::atomic<int> bad{0};
            InProcessFabric::run(n, [&](Transport& t) {
              const int p = t.position();
              std::vector<float> in(count * n), out(count, -999.f);
              for (int64_t i = 0; i < count * n; ++i) in[i] = int_value(p, i);
              CclOptions o = options_for(v, 256);
              o.partials_in_input_dtype = bf16;
              CallContext ctx{t, 0, v.topology, 2, o, ""};
              Reduction red{op, ElementType::F32, bf16, n};
              reduce_scatter_values(ctx, in.data(), out.data(), count, red);
              for (int64_t e = 0; e < count; ++e) {
                const int64_t g = p * count + e;
                double expect = int_value(0, g);
                for (int m = 1; m < n; ++m) {
                  const double x = int_value(m, g);
                  expect = op == ReduceOp::MAX ? std::max(expect, x) : op == ReduceOp::MIN ? std::min(expect, x) : expect + x;
                }
                float want = static_cast<float>(expect);
                if (op == ReduceOp::MEAN) want = want / static_cast<float>(n);
                if (out[e] != want) ++bad;
              }
            });
            EXPECT_EQ(bad.load(), 0) << v.name << " n=" << n << " count=" << count << " op=" << to_string(op)
                                     << " bf16_wire=" << bf16;
          }
        }
      }
    }
  }
}

TEST(CclReduceScatter, FixedOrderBitwise) {
  // Random floats: the result must be exactly the documented chain, on every member.
  for (const Variant& v : kVariants) {
    for (int n : {2, 3, 4, 5, 8, 13, 16}) {
      const int64_t count = 301;
      std::atomic<int> bad{0};
      InProcessFabric::run(n, [&](Transport& t) {
        const int p = t.position();
        std::vector<float> in(count * n), out(count);
        for (int64_t i = 0; i < count * n; ++i) in[i] = real_value(p, i);
        CallContext ctx{t, 0, v.topology, 1, options_for(v, 128), ""};
        reduce_scatter_values(ctx, in.data(), out.data(), count, Reduction{ReduceOp::SUM, ElementType::F32, false, n});
        for (int64_t e = 0; e < count; ++e) {
          const float want = chain_sum(v, n, p, e, count, e < count / 2, real_value, p * count + e);
          if (std::memcmp(&want, &out[e], 4) != 0) ++bad;
        }
      });
      EXPECT_EQ(bad.load(), 0) << v.name << " n=" << n;
    }
  }
}

TEST(CclReduceScatter, IntegerTypesWrapAndCompare) {
  for (ElementType type : {ElementType::I32, ElementType::U32}) {
    for (int n : {2, 3, 7}) {
      std::atomic<int> bad{0};
      InProcessFabric::run(n, [&](Transport& t) {
        const int p = t.position();
        const int64_t count = 50;
        std::vector<int32_t> in(count * n), out(count);
        for (int64_t i = 0; i < count * n; ++i) in[i] = static_cast<int32_t>((p + 1) * 1000003 * (i + 1));
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MIN}) {
          CallContext ctx{t, 0, Topology::RING, 1, options_for(kVariants[0], 64), ""};
          reduce_scatter_values(ctx, in.data(), out.data(), count, Reduction{op, type, false, n});
          for (int64_t e = 0; e < count; ++e) {
            const int64_t g = p * count + e;
            uint32_t sum = 0;
            int32_t smax = INT32_MIN, smin = INT32_MAX;
            uint32_t umax = 0, umin = UINT32_MAX;
            for (int m = 0; m < n; ++m) {
              const int32_t x = static_cast<int32_t>((m + 1) * 1000003 * (g + 1));
              sum += static_cast<uint32_t>(x);
              smax = std::max(smax, x);
              smin = std::min(smin, x);
              umax = std::max(umax, static_cast<uint32_t>(x));
              umin = std::min(umin, static_cast<uint32_t>(x));
            }
            const uint32_t got = static_cast<uint32_t>(out[e]);
            const uint32_t want = op == ReduceOp::SUM ? sum
                                  : op == ReduceOp::MAX ? (type == ElementType::I32 ? static_cast<uint32_t>(smax) : umax)
                                                        : (type == ElementType::I32 ? static_cast<uint32_t>(smin) : umin);
            if (got != want) ++bad;
          }
        }
      });
      EXPECT_EQ(bad.load(), 0) << "type=" << static_cast<int>(type) << " n=" << n;
    }
  }
}

TEST(CclAllReduce, EveryScheduleEveryGroupSizeExactIntegers) {
  for (const Variant& v : kVariants) {
    for (int n = 1; n <= 16; ++n) {
      for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{999}, int64_t{4096}}) {
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MEAN}) {
          std::atomic<int> bad{0};
          InProcessFabric::run(n, [&](Transport& t) {
            const int p = t.position();
            std::vector<float> in(count), out(count, -999.f);
            for (int64_t i = 0; i < count; ++i) in[i] = int_value(p, i);
            CallContext ctx{t, 0, v.topology, 2, options_for(v, 512), ""};
            all_reduce_values(ctx, in.data(), out.data(), count, Reduction{op, ElementType::F32, false, n});
            for (int64_t e = 0; e < count; ++e) {
              double expect = int_value(0, e);
              for (int m = 1; m < n; ++m)
                expect = op == ReduceOp::MAX ? std::max<double>(expect, int_value(m, e)) : expect + int_value(m, e);
              float want = static_cast<float>(expect);
              if (op == ReduceOp::MEAN) want = want / static_cast<float>(n);
              if (out[e] != want) ++bad;
            }
          });
          EXPECT_EQ(bad.load(), 0) << v.name << " n=" << n << " count=" << count << " op=" << to_string(op);
        }
      }
    }
  }
}

// Every link count up to kMaxLinks: each (phase, link, direction) has a lane of its own, so the
// reduce_scatter and all_gather phases of one all_reduce never share a tag, however many chunks.
TEST(CclAllReduce, EveryLinkCountUpToTheMaximumKeepsItsLanesApart) {
  for (const Variant& v : kVariants) {
    for (int n : {2, 3, 4}) {
      for (int links = 1; links <= kMaxLinks; ++links) {
        const int64_t count = 64 * 40;  // 40 chunks of 256 bytes per member slice or more
        std::atomic<int> bad{0};
        InProcessFabric::run(n, [&](Transport& t) {
          const int p = t.position();
          std::vector<float> in(count), out(count, -999.f);
          for (int64_t i = 0; i < count; ++i) in[i] = int_value(p, i);
          CallContext ctx{t, 0, v.topology, links, options_for(v, 256), ""};
          all_reduce_values(ctx, in.data(), out.data(), count, Reduction{ReduceOp::SUM, ElementType::F32, false, n});
          for (int64_t e = 0; e < count; ++e) {
            float want = 0;
            for (int m = 0; m < n; ++m) want += int_value(m, e);
            if (out[e] != want) ++bad;
          }
        });
        EXPECT_EQ(bad.load(), 0) << v.name << " n=" << n << " links=" << links;
      }
    }
  }
}

TEST(CclAllReduce, IdenticalOnEveryMemberAndDeterministic) {
  for (const Variant& v : kVariants) {
    for (int n : {2, 3, 4, 6, 8, 16}) {
      const int64_t count = 2500;
      std::vector<std::vector<float>> results(2 * n);
      for (int run = 0; run < 2; ++run) {
        InProcessFabric::run(n, [&](Transport& t) {
          const int p = t.position();
          std::vector<float> in(count), out(count);
          for (int64_t i = 0; i < count; ++i) in[i] = real_value(p, i);
          CallContext ctx{t, 0, v.topology, 3, options_for(v, 256), ""};
          all_reduce_values(ctx, in.data(), out.data(), count, Reduction{ReduceOp::SUM, ElementType::F32, false, n});
          results[run * n + p] = out;
        });
      }
      for (int k = 1; k < 2 * n; ++k)
        EXPECT_EQ(std::memcmp(results[0].data(), results[k].data(), count * 4), 0) << v.name << " n=" << n << " k=" << k;
    }
  }
}

TEST(CclAllReduce, DirectAndRingGiveTheSameBits) {
  for (int n : {2, 3, 5, 8}) {
    const int64_t count = 777;
    std::vector<float> ring(count), direct(count);
    for (Algorithm a : {Algorithm::RING, Algorithm::DIRECT}) {
      InProcessFabric::run(n, [&](Transport& t) {
        std::vector<float> in(count), out(count);
        for (int64_t i = 0; i < count; ++i) in[i] = real_value(t.position(), i);
        CclOptions o;
        o.algorithm = a;
        o.chunk_bytes = 128;
        CallContext ctx{t, 0, Topology::RING, 1, o, ""};
        all_reduce_values(ctx, in.data(), out.data(), count, Reduction{ReduceOp::SUM, ElementType::F32, false, n});
        if (t.position() == 0) (a == Algorithm::RING ? ring : direct) = out;
      });
    }
    EXPECT_EQ(std::memcmp(ring.data(), direct.data(), count * 4), 0) << "n=" << n;
  }
}

// max and min keep a NaN already in the running result and ignore one that comes later, so they
// show the combination order: slice j must fold x[j+1], x[j+2], ..., x[j+n-1], x[j] (the ring's
// order) whatever the schedule, and every member must hold the same bits. NaNs with distinct
// payloads tell which one survived.
TEST(CclAllReduce, MaxAndMinFoldInTheRingsOrderOnEveryScheduleAndMember) {
  auto nan_of = [](int member) {
    const uint32_t bits = 0x7FC00000u | static_cast<uint32_t>(member + 1);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  auto input = [&](int member, int64_t i) { return (i + member) % 3 == 0 ? nan_of(member) : real_value(member, i); };
  for (const int n : {2, 3, 5}) {
    const int64_t count = 301;
    for (const ReduceOp op : {ReduceOp::MAX, ReduceOp::MIN}) {
      std::vector<float> expected(count);
      for (int j = 0; j < n; ++j)
        for (int64_t i = slice_begin(count, n, j); i < slice_begin(count, n, j + 1); ++i) {
          float acc = input((j + 1) % n, i);
          for (int k = 2; k <= n; ++k) {
            const float next = input((j + k) % n, i);
            acc = op == ReduceOp::MAX ? (next > acc ? next : acc) : (next < acc ? next : acc);
          }
          expected[i] = acc;
        }
      // Ring; Direct through the Plan (chunks); Direct as one message per peer (in place on two).
      const std::pair<Algorithm, size_t> schedules[] = {{Algorithm::RING, 128}, {Algorithm::DIRECT, 128}, {Algorithm::DIRECT, 0}};
      for (const auto& [algorithm, chunk_bytes] : schedules) {
        InProcessFabric::run(n, [&](Transport& t) {
          std::vector<float> in(count), out(count);
          for (int64_t i = 0; i < count; ++i) in[i] = input(t.position(), i);
          CclOptions o;
          o.algorithm = algorithm;
          o.chunk_bytes = chunk_bytes;
          CallContext ctx{t, 0, Topology::RING, 1, o, ""};
          all_reduce_values(ctx, in.data(), out.data(), count, Reduction{op, ElementType::F32, false, n});
          EXPECT_EQ(std::memcmp(out.data(), expected.data(), count * 4), 0)
              << "n=" << n << " " << to_string(algorithm) << " chunk " << chunk_bytes << " member " << t.position()
              << (op == ReduceOp::MAX ? " max" : " min");
        });
      }
    }
  }
}

// Direct with one message per peer runs without a Plan (DirectExchange); with several chunks per
// peer it runs through the Plan. Both, and Ring, must give the same bits on every member.
TEST(CclDirect, OneMessageExchangeMatchesPlannedDirectAndRing) {
  for (int n : {2, 3, 5, 8, 16}) {
    const int64_t count = 301;
    std::vector<std::vector<float>> scatter(3), reduce(3);
    std::vector<std::vector<uint8_t>> gather(2);
    for (int variant = 0; variant < 3; ++variant) {
      InProcessFabric::run(n, [&](Transport& t) {
        const int p = t.position();
        CclOptions o;
        o.algorithm = variant == 2 ? Algorithm::RING : Algorithm::DIRECT;
        o.chunk_bytes = variant == 1 ? 128 : 0;  // 0: one message per peer
        o.watchdog_seconds = 60;
        CallContext ctx{t, 0, Topology::RING, 1, o, ""};
        const Reduction red{ReduceOp::SUM, ElementType::F32, false, n};
        std::vector<float> in(count * n), rs(count), ar(count * n);
        for (int64_t i = 0; i < count * n; ++i) in[i] = real_value(p, i);
        reduce_scatter_values(ctx, in.data(), rs.data(), count, red);
        all_reduce_values(ctx, in.data(), ar.data(), count * n, red);
        // Every member's slice of reduce_scatter, and all_reduce on every member, must agree.
        std::vector<float> all_rs(count * n);
        all_gather_bytes(ctx, rs.data(), count * 4, all_rs.data());
        EXPECT_EQ(std::memcmp(all_rs.data(), ar.data(), count * n * 4), 0) << "n=" << n << " variant=" << variant;
        std::vector<uint8_t> mine(999), out(999 * n);
        for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<uint8_t>(p * 31 + i);
        if (variant < 2) all_gather_bytes(ctx, mine.data(), mine.size(), out.data());
        if (p == n - 1) {
          scatter[variant] = all_rs;
          reduce[variant] = ar;
          if (variant < 2) gather[variant] = out;
        }
      });
    }
    for (int variant = 1; variant < 3; ++variant) {
      EXPECT_EQ(scatter[0], scatter[variant]) << "reduce_scatter n=" << n << " variant=" << variant;
      EXPECT_EQ(reduce[0], reduce[variant]) << "all_reduce n=" << n << " variant=" << variant;
    }
    EXPECT_EQ(gather[0], gather[1]) << "all_gather n=" << n;
    for (int j = 0; j < n; ++j) EXPECT_EQ(gather[0][j * 999 + 5], static_cast<uint8_t>(j * 31 + 5)) << "n=" << n;
  }
}

// Messages between 2 and 8 KiB go out as 2 KiB pieces (DirectExchange): sizes on both sides of
// each boundary, every collective, against the direct computation.
TEST(CclDirect, PiecedMessagesAtEveryBoundary) {
  for (int n : {2, 3, 5}) {
    for (int64_t count : {int64_t{511}, int64_t{512}, int64_t{513}, int64_t{1250}, int64_t{2048}, int64_t{2049}}) {
      std::atomic<int> bad{0};
      InProcessFabric::run(n, [&](Transport& t) {
        const int p = t.position();
        CclOptions o;
        o.algorithm = Algorithm::DIRECT;  // one message per peer: the DirectExchange path
        CallContext ctx{t, 0, Topology::RING, 1, o, ""};
        const Reduction red{ReduceOp::SUM, ElementType::F32, false, n};
        // all_gather of `count` floats per member (4 * count bytes per message).
        std::vector<float> mine(count), gathered(count * n);
        for (int64_t i = 0; i < count; ++i) mine[i] = int_value(p, i);
        all_gather_bytes(ctx, mine.data(), count * 4, gathered.data());
        for (int j = 0; j < n; ++j)
          for (int64_t i = 0; i < count; ++i) bad += gathered[j * count + i] != int_value(j, i);
        // all_reduce of `count` floats (the whole buffer to every peer) and reduce_scatter of
        // n * count floats (a `count`-float slice to each peer).
        std::vector<float> in(count * n), ar(count * n), rs(count);
        for (int64_t i = 0; i < count * n; ++i) in[i] = int_value(p, i);
        all_reduce_values(ctx, in.data(), ar.data(), count, red);
        reduce_scatter_values(ctx, in.data(), rs.data(), count, red);
        for (int64_t i = 0; i < count * n; ++i) {
          float sum = 0;
          for (int m = 0; m < n; ++m) sum += int_value(m, i);
          if (i < count) bad += ar[i] != sum;
          if (i / count == p) bad += rs[i % count] != sum;
        }
      });
      EXPECT_EQ(bad.load(), 0) << "n=" << n << " count=" << count;
    }
  }
}

TEST(CclSchedule, AutoChoice) {
  CclOptions o;
  EXPECT_EQ(choose_schedule(Collective::ALL_GATHER, 8, 1 << 20, Topology::RING, kShm, o).algorithm,
            Algorithm::BIDIRECTIONAL_RING);
  // Two members gather in one message per block, however large (up to 1 GiB per message).
  const Schedule pair = choose_schedule(Collective::ALL_GATHER, 2, 100 << 20, Topology::RING, kShm, o);
  EXPECT_EQ(pair.algorithm, Algorithm::DIRECT);
  EXPECT_EQ(pair.chunk_bytes, size_t{100} << 20);
  EXPECT_EQ(choose_schedule(Collective::ALL_GATHER, 2, size_t{3} << 30, Topology::RING, kShm, o).chunk_bytes,
            size_t{1} << 30);
  EXPECT_EQ(choose_schedule(Collective::ALL_GATHER, 2, 1 << 20, Topology::LINEAR, kShm, o).algorithm, Algorithm::LINE);
  EXPECT_EQ(choose_schedule(Collective::ALL_GATHER, 4, 1 << 20, Topology::RING, kShm, o).algorithm,
            Algorithm::BIDIRECTIONAL_RING);
  EXPECT_EQ(choose_schedule(Collective::ALL_GATHER, 8, 1024, Topology::RING, kShm, o).algorithm, Algorithm::DIRECT);
  EXPECT_EQ(choose_schedule(Collective::REDUCE_SCATTER, 8, 512 << 10, Topology::RING, kShm, o).algorithm,
            Algorithm::DIRECT);
  EXPECT_EQ(choose_schedule(Collective::REDUCE_SCATTER, 8, 4 << 20, Topology::LINEAR, kShm, o).algorithm,
            Algorithm::LINE);
  // all_reduce: direct on two members up to 8 MiB (one message), a ring beyond; 64 KiB on more.
  const Schedule pair_reduce = choose_schedule(Collective::ALL_REDUCE, 2, 8 << 20, Topology::RING, kShm, o);
  EXPECT_EQ(pair_reduce.algorithm, Algorithm::DIRECT);
  EXPECT_EQ(pair_reduce.chunk_bytes, size_t{8} << 20);
  EXPECT_EQ(choose_schedule(Collective::ALL_REDUCE, 2, (8 << 20) + 64, Topology::RING, kShm, o).algorithm,
            Algorithm::RING);
  // Forcing direct on two members keeps the one message; forcing a chunk size keeps the chunks.
  CclOptions forced;
  forced.algorithm = Algorithm::DIRECT;
  EXPECT_EQ(choose_schedule(Collective::ALL_REDUCE, 2, 32 << 20, Topology::RING, kShm, forced).chunk_bytes,
            size_t{32} << 20);
  forced.chunk_bytes = 256 << 10;
  EXPECT_EQ(choose_schedule(Collective::ALL_REDUCE, 2, 32 << 20, Topology::RING, kShm, forced).chunk_bytes,
            size_t{256} << 10);
  EXPECT_EQ(choose_schedule(Collective::ALL_REDUCE, 4, 64 << 10, Topology::RING, kShm, o).algorithm, Algorithm::DIRECT);
  EXPECT_EQ(choose_schedule(Collective::ALL_REDUCE, 4, 128 << 10, Topology::RING, kShm, o).algorithm,
            Algorithm::BIDIRECTIONAL_RING);
  o.algorithm = Algorithm::RING;
  o.chunk_bytes = 4096;
  const Schedule s = choose_schedule(Collective::ALL_REDUCE, 8, 100, Topology::LINEAR, kShm, o);
  EXPECT_EQ(s.algorithm, Algorithm::RING);
  EXPECT_EQ(s.chunk_bytes, 4096u);
  EXPECT_EQ(parse_algorithm("bidirectional_ring"), Algorithm::BIDIRECTIONAL_RING);
  EXPECT_THROW(parse_algorithm("tree"), Error);
}

// Over a network: pieces of 512 KiB (no one-message rule for two members), except two members'
// all_reduce, which stays a direct exchange at every size, in pieces of 8 MiB; every other
// algorithm choice is the same as over shared memory.
TEST(CclSchedule, PerTransportChoice) {
  const CclOptions o;
  auto choice = [&](Collective c, int n, size_t bytes, TransportKind t) {
    return choose_schedule(c, n, bytes, Topology::RING, t, o);
  };
  for (size_t bytes : {size_t{8} << 10, size_t{2} << 20, size_t{64} << 20, size_t{1} << 30}) {
    const Schedule pair = choice(Collective::ALL_REDUCE, 2, bytes, kNet);
    EXPECT_EQ(pair.algorithm, Algorithm::DIRECT) << bytes;
    EXPECT_EQ(pair.chunk_bytes, size_t{8} << 20) << bytes;
  }
  EXPECT_EQ(choice(Collective::ALL_REDUCE, 2, 2 << 20, kShm).chunk_bytes, size_t{2} << 20);  // one message
  EXPECT_EQ(choice(Collective::ALL_REDUCE, 2, 64 << 20, kShm).algorithm, Algorithm::RING);
  EXPECT_EQ(choice(Collective::ALL_REDUCE, 4, 8 << 20, kNet).chunk_bytes, size_t{512} << 10);
  EXPECT_EQ(choice(Collective::ALL_GATHER, 2, 8 << 20, kNet).chunk_bytes, size_t{512} << 10);
  EXPECT_EQ(choice(Collective::ALL_GATHER, 2, 8 << 20, kShm).chunk_bytes, size_t{8} << 20);
  EXPECT_EQ(choice(Collective::REDUCE_SCATTER, 2, 8 << 20, kNet).chunk_bytes, size_t{512} << 10);
  EXPECT_EQ(choice(Collective::REDUCE_SCATTER, 4, 8 << 20, kNet).chunk_bytes, size_t{512} << 10);
  EXPECT_EQ(choice(Collective::REDUCE_SCATTER, 4, 8 << 20, kShm).chunk_bytes, size_t{1} << 20);
  EXPECT_EQ(choice(Collective::ALL_REDUCE, 2, (2 << 20) + 64, kShm).algorithm, Algorithm::DIRECT);
  EXPECT_EQ(choice(Collective::ALL_REDUCE, 2, 8 << 20, kShm).algorithm, Algorithm::DIRECT);
  // A forced algorithm or chunk wins over the transport.
  CclOptions forced;
  forced.algorithm = Algorithm::DIRECT;
  forced.chunk_bytes = 256 << 10;
  const Schedule f = choose_schedule(Collective::ALL_REDUCE, 2, 8 << 20, Topology::RING, kNet, forced);
  EXPECT_EQ(f.algorithm, Algorithm::DIRECT);
  EXPECT_EQ(f.chunk_bytes, size_t{256} << 10);
  for (Collective c : {Collective::ALL_GATHER, Collective::REDUCE_SCATTER, Collective::ALL_REDUCE,
                       Collective::ALL_TO_ALL, Collective::BROADCAST})
    for (int n : {2, 3, 4, 8})
      for (size_t bytes : {size_t{8}, size_t{8} << 10, size_t{1} << 20, size_t{4} << 20, size_t{64} << 20}) {
        if (c == Collective::ALL_REDUCE && n == 2 && bytes > (8 << 20)) continue;
        EXPECT_EQ(choice(c, n, bytes, kShm).algorithm, choice(c, n, bytes, kNet).algorithm)
            << to_string(c) << " n=" << n << " bytes=" << bytes;
      }
}

// Which Open MPI selections leave messages no shared-memory path (`--mca btl tcp,self`).
TEST(TransportKindDetection, OpenMpiSelection) {
  EXPECT_TRUE(mca_forces_network("ob1", "tcp,self"));
  EXPECT_TRUE(mca_forces_network("", "tcp,self"));
  EXPECT_TRUE(mca_forces_network("", "self,tcp"));
  EXPECT_TRUE(mca_forces_network("^ucx", "tcp,self"));
  EXPECT_TRUE(mca_forces_network("", "^vader"));
  EXPECT_TRUE(mca_forces_network("", "^openib,sm"));
  EXPECT_FALSE(mca_forces_network("", ""));
  EXPECT_FALSE(mca_forces_network("ob1", ""));
  EXPECT_FALSE(mca_forces_network("", "vader,tcp,self"));
  EXPECT_FALSE(mca_forces_network("", "self,sm"));
  EXPECT_FALSE(mca_forces_network("", "^openib"));
  EXPECT_FALSE(mca_forces_network("", "smcuda,tcp,self"));
  EXPECT_FALSE(mca_forces_network("ucx", "tcp,self"));  // UCX ignores the BTL list
  EXPECT_EQ(to_string(kNet), "net");
  EXPECT_EQ(to_string(kShm), "shm");
}

TEST(CclWatchdog, ReportsOpStepPeerAndBytes) {
  const std::string report = stuck_report([](const CallContext& ctx) {
    std::vector<uint8_t> mine(4096), out(8192);
    all_gather_bytes(ctx, mine.data(), mine.size(), out.data());
  });
  EXPECT_NE(report.find("all_gather stuck at step 0 waiting for peer virtual rank 1"), std::string::npos) << report;
  EXPECT_NE(report.find("bytes outstanding"), std::string::npos) << report;
}

}  // namespace
}  // namespace meshnn::ccl
