// attention_with_kv_cache: RoPE, the cache update and attention over the cache in one pass over
// the rows, reading the cache tile by tile in its stored format (an online softmax, so no row of
// scores is ever materialised and only the tiles up to each query's position are decoded).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "cache_attention.hpp"
#include "meshnn/core/scratch.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/kernels/row_kernels.hpp"
#include "meshnn/ops/attention.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "op_utils.hpp"
#include "tile_rows.hpp"

namespace meshnn {
namespace {

void rotate_half(float* x, const float* cos, const float* sin, int64_t d) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i + half] + a * sin[i + half];
  }
}

// The first of the tiles of tile-row `tile_row` of one [S_max, D] matrix of a cache.
const std::byte* tile_row_start(const Tensor& cache, int64_t matrix, int64_t tile_row, int64_t tile_cols) {
  const int64_t tile_rows = round_up_to_tile(cache.shape()[2]) / 32;
  return cache.data<std::byte>() +
         static_cast<size_t>((matrix * tile_rows + tile_row) * tile_cols) * tile_bytes(cache.dtype());
}

// The 32 cache rows of tile-row `tile_row` of one [S_max, D] matrix, decoded to floats: as rows
// [32][dp] (dp = D rounded up to 32), or transposed [dp][32] (`transposed`: the keys, whose scores
// the row kernels compute for all 32 positions at once). A bfloat16 cache (the default) is read
// straight from its tiles, without a tile of floats in between; its values are not decoded here
// at all (RowKernelSet::attend_tile_bf16 reads them).
void decode_tile_row(const kernels::RowKernelSet& rk, const Tensor& cache, int64_t matrix, int64_t tile_row,
                     int64_t dp, bool transposed, float* out) {
  const int64_t tile_cols = dp / 32;
  const size_t bytes = tile_bytes(cache.dtype());
  const bool bf16 = cache.dtype() == DataType::BFLOAT16;
  float faces[kTileVolume];
  for (int64_t tc = 0; tc < tile_cols; ++tc) {
    const std::byte* tile = tile_row_start(cache, matrix, tile_row, tile_cols) + static_cast<size_t>(tc) * bytes;
    if (transposed) {
      if (bf16) {
        rk.transpose_tile_bf16(reinterpret_cast<const uint16_t*>(tile), out + tc * 32 * 32);
      } else {
        ops_detail::tile_to_faces(tile, cache.dtype(), faces);
        rk.transpose_tile(faces, out + tc * 32 * 32);
      }
      continue;
    }
    ops_detail::tile_to_faces(tile, cache.dtype(), faces);
    // Face by face (16x16, row-major inside; faces 0-3 cover rows 0-15 then 16-31, columns 0-15
    // then 16-31 of each): runs of 16 values.
    for (int64_t f = 0; f < 4; ++f)
      for (int64_t r = 0; r < 16; ++r)
        std::copy_n(faces + f * 256 + r * 16, 16, out + (f / 2 * 16 + r) * dp + tc * 32 + f % 2 * 16);
  }
}

void check_cache(const Tensor& cache, const char* what, const char* name) {
  MESHNN_CHECK(cache.shape().rank() == 4 && cache.layout() == Layout::TILE,
               "{}: {} must be a TILE tensor [slots, Hkv, S_max, D], got {} {}", what, name, cache.shape(),
               to_string(cache.layout()));
  MESHNN_CHECK(
      cache.dtype() == DataType::FLOAT32 || cache.dtype() == DataType::BFLOAT16 || cache.dtype() == DataType::BFLOAT8_B,
      "{}: {} must be float32, bfloat16 or bfloat8_b, got {}", what, name, to_string(cache.dtype()));
}

}  // namespace

namespace ops_detail {

void attend_over_cache(const float* query_rows, int64_t stride, const Tensor& k_cache, const Tensor& v_cache,
                       std::span<const int64_t> slots, std::span<const int64_t> positions, int64_t hq, float sc,
                       int64_t window, float* out) {
  const int64_t m = static_cast<int64_t>(slots.size()), hkv = k_cache.shape()[1], d = k_cache.shape()[3];
  // Attention. Work items: (segment of consecutive rows of one slot, KV head, share of its query
  // heads); query heads are split further only when there are fewer items than threads would use.
  struct Segment {
    int64_t begin, end, min_first, max_position;
  };
  // The first position row r attends to: the whole context, or the last `window` positions.
  const auto first_position = [&](int64_t r) {
    return window > 0 ? std::max<int64_t>(0, positions[r] - window + 1) : 0;
  };
  // Capacity kept from call to call. The workers must see this thread's vector: a lambda names a
  // thread_local by the running thread, so they get it through a reference.
  thread_local std::vector<Segment> kept;
  std::vector<Segment>& segments = kept;
  segments.clear();
  for (int64_t begin = 0; begin < m;) {
    int64_t end = begin + 1, max_position = positions[begin], min_first = first_position(begin);
    for (; end < m && slots[end] == slots[begin]; ++end) {
      max_position = std::max(max_position, positions[end]);
      min_first = std::min(min_first, first_position(end));
    }
    segments.push_back({begin, end, min_first, max_position});
    begin = end;
  }
  const int64_t group = hq / hkv;
  const int64_t base_items = static_cast<int64_t>(segments.size()) * hkv;
  // Waking the workers costs more than a short call saves by splitting: one user at a short context
  // ran slower on two threads than on one (meshnn-kernel-bench --attention 1x150 --heads 16/2
  // --threads 1,2; docs/performance.md, session 28). Below kInlineMultiplyAdds the call stays on
  // this thread.
  constexpr int64_t kInlineMultiplyAdds = int64_t{1} << 20;
  int64_t multiply_adds = 0;
  for (const Segment& seg : segments)
    multiply_adds += (seg.end - seg.begin) * hq * d * 2 * (seg.max_position - seg.min_first + 1);
  const bool inline_call = multiply_adds < kInlineMultiplyAdds;
  // Each share decodes its KV tiles itself: split heads only as far as idle threads need.
  const int64_t threads = inline_call ? 1 : ops_detail::worker_count();
  const int64_t head_shares = std::min<int64_t>(group, std::max<int64_t>(1, (threads + base_items - 1) / base_items));
  const int64_t dp = round_up_to_tile(d);
  const kernels::RowKernelSet& rk = kernels::row_kernel_set();
  const bool bf16_values = v_cache.dtype() == DataType::BFLOAT16;
  const auto attend_items = [&](int64_t item_begin, int64_t item_end, int) {
    ScratchScope scratch;
    float* keys_t = scratch.acquire_as<float>(static_cast<size_t>(32 * dp));
    float* values = bf16_values ? nullptr : scratch.acquire_as<float>(static_cast<size_t>(32 * dp));
    for (int64_t item = item_begin; item < item_end; ++item) {
      const Segment& seg = segments[static_cast<size_t>(item / (hkv * head_shares))];
      const int64_t kvh = item / head_shares % hkv, share = item % head_shares;
      const int64_t h_begin = kvh * group + share * group / head_shares;
      const int64_t h_end = kvh * group + (share + 1) * group / head_shares;
      const int64_t queries = (seg.end - seg.begin) * (h_end - h_begin);
      ScratchScope item_scratch;  // each item reuses the same blocks
      float* acc = item_scratch.acquire_as<float>(static_cast<size_t>(queries * d));
      float* running_max = item_scratch.acquire_as<float>(static_cast<size_t>(2 * queries));
      float* running_sum = running_max + queries;
      std::fill_n(acc, queries * d, 0.0f);
      std::fill_n(running_max, queries, -std::numeric_limits<float>::infinity());
      std::fill_n(running_sum, queries, 0.0f);
      const int64_t matrix = slots[seg.begin] * hkv + kvh;
      for (int64_t tile_row = seg.min_first / 32; tile_row <= seg.max_position / 32; ++tile_row) {
        decode_tile_row(rk, k_cache, matrix, tile_row, dp, /*transposed=*/true, keys_t);
        const uint16_t* value_tiles =
            bf16_values ? reinterpret_cast<const uint16_t*>(tile_row_start(v_cache, matrix, tile_row, dp / 32))
                        : nullptr;
        if (!bf16_values) decode_tile_row(rk, v_cache, matrix, tile_row, dp, /*transposed=*/false, values);
        for (int64_t r = seg.begin; r < seg.end; ++r) {
          const int64_t first = std::max<int64_t>(0, first_position(r) - tile_row * 32);
          const int64_t last = std::min<int64_t>(31, positions[r] - tile_row * 32);
          if (last < first) continue;
          const int64_t qi = (r - seg.begin) * (h_end - h_begin);  // the row's first head
          const float* q = query_rows + r * stride + h_begin * d;
          if (bf16_values)
            rk.attend_tile_bf16(q, h_end - h_begin, keys_t, value_tiles, d, static_cast<int>(first),
                                static_cast<int>(last), sc, acc + qi * d, running_max + qi, running_sum + qi);
          else
            rk.attend_tile(q, h_end - h_begin, keys_t, values, d, dp, static_cast<int>(first), static_cast<int>(last),
                           sc, acc + qi * d, running_max + qi, running_sum + qi);
        }
      }
      for (int64_t r = seg.begin; r < seg.end; ++r)
        for (int64_t h = h_begin; h < h_end; ++h) {
          const int64_t qi = (r - seg.begin) * (h_end - h_begin) + (h - h_begin);
          const float inv = 1.0f / running_sum[qi];
          float* o = out + (r * hq + h) * d;
          for (int64_t i = 0; i < d; ++i) o[i] = acc[qi * d + i] * inv;
        }
    }
  };
  if (inline_call)
    attend_items(0, base_items * head_shares, 0);
  else
    ops_detail::run_parallel(base_items * head_shares, attend_items);
}

}  // namespace ops_detail

void attention_with_kv_cache_into(const Tensor& qkv, const QkvColumns& columns, Tensor& k_cache, Tensor& v_cache,
                                  const RotaryTables& rope, std::span<const int64_t> slots,
                                  std::span<const int64_t> positions, int64_t num_q_heads, DataType out_dtype,
                                  Tensor& output, std::optional<float> scale,
                                  std::optional<int64_t> sliding_window_size) {
  trace::Scope scope("op", "attention_with_kv_cache");
  if (scope.active())
    scope.describe(fmt::format(R"("rows":{},"qkv":"{}","kv_cache":"{} {}")", positions.size(), qkv.shape(),
                               k_cache.shape(), to_string(k_cache.dtype())));
  const char* what = "attention_with_kv_cache";
  ops_detail::check_float(qkv, what, "qkv");
  check_cache(k_cache, what, "k_cache");
  check_cache(v_cache, what, "v_cache");
  MESHNN_CHECK(k_cache.shape() == v_cache.shape() && k_cache.dtype() == v_cache.dtype(),
               "{}: k_cache {} {} and v_cache {} {} differ", what, k_cache.shape(), to_string(k_cache.dtype()),
               v_cache.shape(), to_string(v_cache.dtype()));
  const int64_t num_slots = k_cache.shape()[0], hkv = k_cache.shape()[1], smax = k_cache.shape()[2];
  const int64_t d = k_cache.shape()[3], hq = num_q_heads;
  MESHNN_CHECK(qkv.shape().rank() >= 2, "{}: qkv must be [..., M, W], got {}", what, qkv.shape());
  const int64_t m = qkv.shape()[-2], w = qkv.shape()[-1];
  MESHNN_CHECK(qkv.volume() == m * w, "{}: qkv's leading dims must be 1, got {}", what, qkv.shape());
  MESHNN_CHECK(hq > 0 && hq % hkv == 0, "{}: {} query heads are not a multiple of {} KV heads", what, hq, hkv);
  MESHNN_CHECK(columns.q_column >= 0 && columns.k_column >= 0 && columns.v_column >= 0 &&
                   columns.q_column + hq * d <= w && columns.k_column + hkv * d <= w && columns.v_column + hkv * d <= w,
               "{}: qkv width {} cannot hold {} q heads at column {} and {} k/v heads at columns {}/{} of {} values",
               what, w, hq, columns.q_column, hkv, columns.k_column, columns.v_column, d);
  MESHNN_CHECK(rope.cos.shape().rank() == 2 && rope.cos.shape() == rope.sin.shape() && rope.cos.shape()[1] == d &&
                   rope.cos.dtype() == DataType::FLOAT32 && rope.cos.layout() == Layout::ROW_MAJOR &&
                   rope.sin.dtype() == DataType::FLOAT32 && rope.sin.layout() == Layout::ROW_MAJOR,
               "{}: rotary tables must be float32 ROW_MAJOR [positions, {}], got {}", what, d, rope.cos.shape());
  MESHNN_CHECK(static_cast<int64_t>(slots.size()) == m && static_cast<int64_t>(positions.size()) == m,
               "{}: {} rows need as many slots and positions, got {} and {}", what, m, slots.size(), positions.size());
  const int64_t table_positions = rope.cos.shape()[0];
  thread_local std::vector<std::pair<int64_t, int64_t>> written;  // capacity kept from call to call
  written.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    MESHNN_CHECK(slots[i] >= 0 && slots[i] < num_slots, "{}: row {} slot {} is outside the cache's [0, {})", what, i,
                 slots[i], num_slots);
    MESHNN_CHECK(positions[i] >= 0 && positions[i] < std::min(smax, table_positions),
                 "{}: row {} position {} is outside the cache / rotary tables [0, {})", what, i, positions[i],
                 std::min(smax, table_positions));
    written[i] = {slots[i], positions[i]};
  }
  std::sort(written.begin(), written.end());
  MESHNN_CHECK(std::adjacent_find(written.begin(), written.end()) == written.end(),
               "{}: two rows write the same slot and position", what);
  MESHNN_CHECK(&output != &qkv, "{}: output must not be the qkv tensor", what);
  MESHNN_CHECK(!sliding_window_size || *sliding_window_size > 0, "{}: sliding_window_size must be > 0, got {}", what,
               sliding_window_size.value_or(0));
  if (m == 0) {
    output = Tensor(Shape{1, 1, 0, hq * d}, out_dtype, Layout::TILE);
    return;
  }

  ScratchScope scratch;
  float* rows = scratch.acquire_as<float>(static_cast<size_t>(m * w));
  // A run of rows is at most all m of them.
  float* run_values = scratch.acquire_as<float>(static_cast<size_t>(m * d));
  if (ops_detail::has_row_access(qkv)) {
    for (int64_t i = 0; i < m; ++i) ops_detail::read_row(qkv, i, rows + i * w);
  } else {
    const std::vector<float> values = qkv.to_float();
    std::copy(values.begin(), values.end(), rows);
  }
  const float* cos = rope.cos.data<float>();
  const float* sin = rope.sin.data<float>();
  for (int64_t i = 0; i < m; ++i) {
    float* row = rows + i * w;
    const int64_t p = positions[i];
    for (int64_t h = 0; h < hq; ++h) rotate_half(row + columns.q_column + h * d, cos + p * d, sin + p * d, d);
    for (int64_t h = 0; h < hkv; ++h) rotate_half(row + columns.k_column + h * d, cos + p * d, sin + p * d, d);
  }

  // Cache update: runs of rows with one slot and consecutive positions are written together, so a
  // block-float tile is re-encoded once per run, not once per row.
  for (int64_t begin = 0; begin < m;) {
    int64_t end = begin + 1;
    while (end < m && slots[end] == slots[begin] && positions[end] == positions[end - 1] + 1) ++end;
    const int64_t len = end - begin;
    for (auto [cache, column] : {std::pair<Tensor*, int64_t>{&k_cache, columns.k_column}, {&v_cache, columns.v_column}})
      for (int64_t h = 0; h < hkv; ++h) {
        for (int64_t r = 0; r < len; ++r) std::copy_n(rows + (begin + r) * w + column + h * d, d, run_values + r * d);
        ops_detail::write_rows(*cache, slots[begin] * hkv + h, positions[begin], len, run_values);
      }
    begin = end;
  }

  const float sc = scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  float* out = scratch.acquire_as<float>(static_cast<size_t>(m * hq * d));
  ops_detail::attend_over_cache(rows + columns.q_column, w, k_cache, v_cache, slots, positions, hq, sc,
                                sliding_window_size.value_or(0), out);
  ops_detail::write_logical_rows(output, Shape{1, 1, m, hq * d}, out_dtype, out);
}

Tensor attention_with_kv_cache(const Tensor& qkv, const QkvColumns& columns, Tensor& k_cache, Tensor& v_cache,
                               const RotaryTables& rope, std::span<const int64_t> slots,
                               std::span<const int64_t> positions, int64_t num_q_heads, DataType out_dtype,
                               std::optional<float> scale, std::optional<int64_t> sliding_window_size) {
  Tensor out;
  attention_with_kv_cache_into(qkv, columns, k_cache, v_cache, rope, slots, positions, num_q_heads, out_dtype, out,
                               scale, sliding_window_size);
  return out;
}

}  // namespace meshnn
