#include "meshnn/ops/attention.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "meshnn/ops/data_movement.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/block_float.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "cache_attention.hpp"
#include "op_utils.hpp"
#include "tile_rows.hpp"

namespace meshnn {

namespace {

using ops_detail::dot;

using ops_detail::run_parallel;
using ops_detail::write_rows;

// out[D] = softmax(scale * q . k_j for j < n_keys) . v_j; k/v rows of D floats, row stride D.
void attend(const float* q, const float* k, const float* v, int64_t n_keys, int64_t d, float scale,
            std::vector<float>& scores, float* out) {
  scores.resize(n_keys);
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n_keys; ++j) {
    scores[j] = scale * dot(q, k + j * d, d);
    mx = std::fmax(mx, scores[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < d; ++i) out[i] = 0.0f;
  for (int64_t j = 0; j < n_keys; ++j) {
    const float p = scores[j] * inv;
    const float* vj = v + j * d;
    for (int64_t i = 0; i < d; ++i) out[i] += p * vj[i];
  }
}

void check_rank4(const Tensor& t, const char* what, const char* name) {
  MESHNN_CHECK(t.shape().rank() == 4, "{}: {} must be rank 4, got {}", what, name, t.shape());
  ops_detail::check_float(t, what, name);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    std::optional<float> scale) {
  const char* what = "scaled_dot_product_attention";
  check_rank4(q, what, "q");
  check_rank4(k, what, "k");
  check_rank4(v, what, "v");
  const int64_t b = q.shape()[0], hq = q.shape()[1], s = q.shape()[2], d = q.shape()[3];
  const int64_t hkv = k.shape()[1], skv = k.shape()[2];
  MESHNN_CHECK(k.shape() == v.shape(), "{}: k {} and v {} differ", what, k.shape(), v.shape());
  MESHNN_CHECK(k.shape()[0] == b && k.shape()[3] == d, "{}: q {} and k {} disagree on batch or head_dim", what,
               q.shape(), k.shape());
  MESHNN_CHECK(hkv > 0 && hq % hkv == 0, "{}: {} query heads are not a multiple of {} KV heads", what, hq, hkv);
  MESHNN_CHECK(!causal || skv >= s, "{}: causal needs at least as many keys ({}) as queries ({})", what, skv, s);
  const float sc = scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  const std::vector<float> qv = q.to_float(), kv = k.to_float(), vv = v.to_float();
  std::vector<float> out(qv.size());
  const int64_t group = hq / hkv;
  run_parallel(b * hq, [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t bi = bh / hq, h = bh % hq, kvh = h / group;
      const float* kb = kv.data() + (bi * hkv + kvh) * skv * d;
      const float* vb = vv.data() + (bi * hkv + kvh) * skv * d;
      for (int64_t i = 0; i < s; ++i) {
        const int64_t n_keys = causal ? i + (skv - s) + 1 : skv;
        attend(qv.data() + (bh * s + i) * d, kb, vb, n_keys, d, sc, scores, out.data() + (bh * s + i) * d);
      }
    }
  });
  return ops_detail::like(out, q.shape(), q);
}

Tensor scaled_dot_product_attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                           std::span<const int64_t> positions, std::optional<float> scale) {
  const char* what = "scaled_dot_product_attention_decode";
  check_rank4(q, what, "q");
  check_rank4(k_cache, what, "k_cache");
  check_rank4(v_cache, what, "v_cache");
  MESHNN_CHECK(q.shape()[0] == 1, "{}: q must be [1, B, Hq, D], got {}", what, q.shape());
  const int64_t b = q.shape()[1], hq = q.shape()[2], d = q.shape()[3];
  const int64_t hkv = k_cache.shape()[1], smax = k_cache.shape()[2];
  MESHNN_CHECK(k_cache.shape() == v_cache.shape(), "{}: k_cache {} and v_cache {} differ", what, k_cache.shape(),
               v_cache.shape());
  MESHNN_CHECK(k_cache.shape()[0] == b && k_cache.shape()[3] == d,
               "{}: q {} and caches {} disagree on users or head_dim", what, q.shape(), k_cache.shape());
  MESHNN_CHECK(hkv > 0 && hq % hkv == 0, "{}: {} query heads are not a multiple of {} KV heads", what, hq, hkv);
  MESHNN_CHECK(static_cast<int64_t>(positions.size()) == b, "{}: {} positions given for {} users", what,
               positions.size(), b);
  for (int64_t i = 0; i < b; ++i)
    MESHNN_CHECK(positions[i] >= 0 && positions[i] < smax, "{}: user {} position {} is outside the cache [0, {})", what,
                 i, positions[i], smax);
  const float sc = scale.value_or(1.0f / std::sqrt(static_cast<float>(d)));
  // The cache is read in its stored format, only the positions in use (user b is slot b). A
  // ROW_MAJOR cache is tiled first: TILE is the layout a cache lives in.
  const auto tiled = [](const Tensor& c) { return c.layout() == Layout::TILE ? c : c.to_layout(Layout::TILE); };
  const Tensor k = tiled(k_cache), v = tiled(v_cache);
  std::vector<int64_t> slots(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) slots[static_cast<size_t>(i)] = i;
  const std::vector<float> qv = q.to_float();
  std::vector<float> out(static_cast<size_t>(b * hq * d));
  ops_detail::attend_over_cache(qv.data(), hq * d, k, v, slots, positions, hq, sc, /*window=*/0, out.data());
  return ops_detail::like(out, q.shape(), q);
}

void update_cache(Tensor& cache, const Tensor& new_kv, std::span<const int64_t> positions) {
  const char* what = "update_cache";
  check_rank4(cache, what, "cache");
  check_rank4(new_kv, what, "new_kv");
  const int64_t b = cache.shape()[0], hkv = cache.shape()[1], smax = cache.shape()[2], d = cache.shape()[3];
  MESHNN_CHECK(new_kv.shape() == (Shape{1, b, hkv, d}), "{}: new_kv must be [1, {}, {}, {}] for cache {}, got {}", what,
               b, hkv, d, cache.shape(), new_kv.shape());
  MESHNN_CHECK(static_cast<int64_t>(positions.size()) == b, "{}: {} positions given for {} users", what,
               positions.size(), b);
  for (int64_t i = 0; i < b; ++i)
    MESHNN_CHECK(positions[i] >= 0 && positions[i] < smax, "{}: user {} position {} is outside the cache [0, {})", what,
                 i, positions[i], smax);
  const std::vector<float> v = new_kv.to_float();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < hkv; ++h) write_rows(cache, bi * hkv + h, positions[bi], 1, v.data() + (bi * hkv + h) * d);
}

void fill_cache(Tensor& cache, const Tensor& kv, int64_t batch_index) {
  const char* what = "fill_cache";
  check_rank4(cache, what, "cache");
  check_rank4(kv, what, "kv");
  const int64_t b = cache.shape()[0], hkv = cache.shape()[1], smax = cache.shape()[2], d = cache.shape()[3];
  const int64_t s = kv.shape()[2];
  MESHNN_CHECK(kv.shape()[0] == 1 && kv.shape()[1] == hkv && kv.shape()[3] == d && s <= smax,
               "{}: kv must be [1, {}, S <= {}, {}] for cache {}, got {}", what, hkv, smax, d, cache.shape(),
               kv.shape());
  MESHNN_CHECK(batch_index >= 0 && batch_index < b, "{}: batch_index {} is outside [0, {})", what, batch_index, b);
  if (s == 0) return;
  const std::vector<float> v = kv.to_float();
  for (int64_t h = 0; h < hkv; ++h) write_rows(cache, batch_index * hkv + h, 0, s, v.data() + h * s * d);
}

Tensor split_heads(const Tensor& x, int64_t num_heads) {
  const Shape& s = x.shape();
  const bool rank4 = s.rank() == 4;
  MESHNN_CHECK((rank4 && s[1] == 1) || s.rank() == 3, "split_heads: x must be [B, 1, S, H*D] or [B, S, H*D], got {}",
               s);
  MESHNN_CHECK(num_heads > 0 && s[-1] % num_heads == 0, "split_heads: width {} is not a multiple of {} heads", s[-1],
               num_heads);
  const int64_t b = s[0], seq = s[-2], d = s[-1] / num_heads;
  const Tensor r = reshape(x, {b, seq, num_heads, d});
  const int dims[] = {0, 2, 1, 3};
  return permute(r, dims);
}

Tensor concat_heads(const Tensor& x) {
  MESHNN_CHECK(x.shape().rank() == 4, "concat_heads: x must be [B, H, S, D], got {}", x.shape());
  const int64_t b = x.shape()[0], h = x.shape()[1], seq = x.shape()[2], d = x.shape()[3];
  const int dims[] = {0, 2, 1, 3};
  return reshape(permute(x, dims), {b, 1, seq, h * d});
}

QkvHeads split_qkv_heads(const Tensor& qkv, int64_t num_q_heads, int64_t num_kv_heads) {
  const Shape& s = qkv.shape();
  const int64_t heads = num_q_heads + 2 * num_kv_heads;
  MESHNN_CHECK(s.rank() == 4 && s[1] == 1, "split_qkv_heads: qkv must be [B, 1, S, (Hq + 2 Hkv) * D], got {}", s);
  MESHNN_CHECK(num_q_heads > 0 && num_kv_heads > 0 && s[-1] % heads == 0,
               "split_qkv_heads: width {} is not a multiple of Hq + 2 Hkv = {}", s[-1], heads);
  const int64_t d = s[-1] / heads;
  const Tensor all = split_heads(qkv, heads);  // [B, heads, S, D]
  auto part = [&](int64_t h0, int64_t h1) {
    const int64_t begins[] = {0, h0, 0, 0};
    const int64_t ends[] = {s[0], h1, s[2], d};
    return slice(all, begins, ends);
  };
  return {part(0, num_q_heads), part(num_q_heads, num_q_heads + num_kv_heads), part(num_q_heads + num_kv_heads, heads)};
}

QkvHeads split_qkv_heads_decode(const Tensor& qkv, int64_t num_q_heads, int64_t num_kv_heads) {
  const Shape& s = qkv.shape();
  const int64_t heads = num_q_heads + 2 * num_kv_heads;
  MESHNN_CHECK(s.rank() == 4 && s[0] == 1 && s[1] == 1,
               "split_qkv_heads_decode: qkv must be [1, 1, B, (Hq + 2 Hkv) * D], got {}", s);
  MESHNN_CHECK(num_q_heads > 0 && num_kv_heads > 0 && s[-1] % heads == 0,
               "split_qkv_heads_decode: width {} is not a multiple of Hq + 2 Hkv = {}", s[-1], heads);
  const int64_t b = s[2], d = s[-1] / heads;
  const Tensor all = reshape(qkv, {1, b, heads, d});
  auto part = [&](int64_t h0, int64_t h1) {
    const int64_t begins[] = {0, 0, h0, 0};
    const int64_t ends[] = {1, b, h1, d};
    return slice(all, begins, ends);
  };
  return {part(0, num_q_heads), part(num_q_heads, num_q_heads + num_kv_heads), part(num_q_heads + num_kv_heads, heads)};
}

Tensor concat_heads_decode(const Tensor& x) {
  MESHNN_CHECK(x.shape().rank() == 4 && x.shape()[0] == 1, "concat_heads_decode: x must be [1, B, H, D], got {}",
               x.shape());
  return reshape(x, {1, 1, x.shape()[1], x.shape()[2] * x.shape()[3]});
}

}  // namespace meshnn
