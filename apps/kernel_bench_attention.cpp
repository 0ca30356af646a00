// meshnn-kernel-bench --attention (see kernel_bench_attention.hpp).
#include "kernel_bench_attention.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "kernel_bench_machine.hpp"
#include "meshnn/core/process_context.hpp"
#include "meshnn/io/json_output.hpp"
#include "meshnn/ops/attention.hpp"
#include "meshnn/ops/embedding.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn::bench {
namespace {

constexpr int64_t kHeadDim = 64;

std::vector<float> normal_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// One case's operands: qkv rows [1, 1, users, (q + 2 kv) x 64], caches [users, kv, S, 64] with S
// the positions rounded up to a tile, every user in its own slot.
struct AttentionOperands {
  Tensor qkv, k_cache, v_cache;
  RotaryTables rope;
  std::vector<int64_t> slots, positions;
  QkvColumns columns;

  AttentionOperands(const BenchOptions& o, const AttentionCase& c) {
    const int64_t width = (o.q_heads + 2 * o.kv_heads) * kHeadDim, capacity = (c.positions + 1 + 31) / 32 * 32;
    qkv = Tensor::from_float(normal_values(c.users * width, 1), Shape{1, 1, c.users, width}, DataType::BFLOAT16,
                             Layout::TILE);
    const Shape cache_shape{c.users, o.kv_heads, capacity, kHeadDim};
    k_cache = Tensor::from_float(normal_values(cache_shape.volume(), 2), cache_shape, o.kv_dtype, Layout::TILE);
    v_cache = Tensor::from_float(normal_values(cache_shape.volume(), 3), cache_shape, o.kv_dtype, Layout::TILE);
    rope = make_rotary_tables(kHeadDim, capacity);
    for (int64_t u = 0; u < c.users; ++u) {
      slots.push_back(u);
      positions.push_back(c.positions);
    }
    columns = {0, o.q_heads * kHeadDim, (o.q_heads + o.kv_heads) * kHeadDim};
  }
};

// One decode step's attention call on the case's operands.
void attend(const BenchOptions& o, AttentionOperands& x, Tensor& out) {
  attention_with_kv_cache_into(x.qkv, x.columns, x.k_cache, x.v_cache, x.rope, x.slots, x.positions, o.q_heads,
                               DataType::BFLOAT16, out);
}

// Best time of one call over at least min_time seconds (at least 3 calls after a warm-up).
double best_call_seconds(const BenchOptions& o, AttentionOperands& x, Tensor& out) {
  return sorted_run_seconds([&] { attend(o, x, out); }, o.min_time, 3).front();
}

volatile uint64_t eviction_sink = 0;

// Median time of one call whose caches were emptied first, as in a decode step: between one
// layer's attention and the next, the step streams that layer's weights (tens of MiB) through
// every cache level. The eviction pass is not timed.
double cold_call_seconds(const BenchOptions& o, AttentionOperands& x, Tensor& out) {
  constexpr size_t kEvictBytes = size_t{256} << 20;  // larger than any L3 seen on these machines
  static std::vector<uint64_t> evict(kEvictBytes / sizeof(uint64_t), 1);
  const auto empty_caches = [] {
    uint64_t sink = 0;
    for (size_t i = 0; i < evict.size(); i += 8) sink += evict[i];  // one read per 64-byte line
    eviction_sink = sink;                                            // keeps the reads
  };
  const std::vector<double> seconds = sorted_run_seconds([&] { attend(o, x, out); }, 0.0, 15, empty_caches);
  return seconds[seconds.size() / 2];
}

}  // namespace

std::vector<std::string> measure_attention(const BenchOptions& o) {
  const Machine machine = measure_machine();
  fmt::print("# decode attention (attention_with_kv_cache): {}/{} q/KV heads of {} dims, {} cache; "
             "single-core peak {:.1f} GFLOP/s float32 FMA\n",
             o.q_heads, o.kv_heads, kHeadDim, to_string(o.kv_dtype), machine.peak);
  fmt::print("{:>6} {:>9} {:>4} {:>12} {:>9} {:>6} {:>9} {:>14}\n", "users", "positions", "thr", "us/call", "GFLOP/s",
             "%peak", "KV GB/s", "cold us/call");
  std::vector<std::string> records;
  for (const AttentionCase& c : o.attention) {
    AttentionOperands x(o, c);
    const double attended = static_cast<double>(c.positions + 1);
    const double flops = 4.0 * static_cast<double>(c.users * o.q_heads * kHeadDim) * attended;
    // The cache tiles a step reads: every attended position's K and V rows of every KV head.
    const double tile_rows = std::ceil(attended / 32);
    const double kv_bytes = 2.0 * static_cast<double>(c.users * o.kv_heads) * tile_rows * 2 *
                            static_cast<double>(tile_bytes(o.kv_dtype));
    for (int threads : o.thread_counts) {
      const std::unique_ptr<ThreadPool> pool = pinned_pool(threads);
      set_default_worker_pool(pool.get());
      Tensor out;
      const double seconds = best_call_seconds(o, x, out);
      const double cold_seconds = cold_call_seconds(o, x, out);
      set_default_worker_pool(nullptr);
      const double gflops = flops / seconds / 1e9, kv_gbps = kv_bytes / seconds / 1e9;
      const double percent = 100 * gflops / (machine.peak * threads);
      fmt::print("{:>6} {:>9} {:>4} {:>12.1f} {:>9.1f} {:>5.0f}% {:>9.2f} {:>14.1f}\n", c.users, c.positions, threads,
                 seconds * 1e6, gflops, percent, kv_gbps, cold_seconds * 1e6);
      records.push_back(nlohmann::ordered_json{{"op", "attention_with_kv_cache"},
                                               {"users", c.users},
                                               {"positions", c.positions},
                                               {"q_heads", o.q_heads},
                                               {"kv_heads", o.kv_heads},
                                               {"head_dim", kHeadDim},
                                               {"kv_dtype", to_string(o.kv_dtype)},
                                               {"threads", threads},
                                               {"us_per_call", io::round_to(seconds * 1e6, 2)},
                                               {"cold_us_per_call", io::round_to(cold_seconds * 1e6, 2)},
                                               {"gflops", io::round_to(gflops, 3)},
                                               {"peak_gflops", io::round_to(machine.peak, 1)},
                                               {"kv_GBps", io::round_to(kv_gbps, 3)}}
                            .dump());
    }
  }
  return records;
}

}  // namespace meshnn::bench
