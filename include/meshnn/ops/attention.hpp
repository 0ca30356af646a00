// Scaled dot product attention (prefill and decode), the KV cache ops, and head split/concat.
// Layouts follow TT-NN's LLM code: prefill activations [B, H, S, D]; decode activations
// [1, B, H, D] (one token per user); caches [B, Hkv, S_max, D]. Grouped-query attention: Hq is a
// multiple of Hkv and query head h reads KV head h / (Hq / Hkv). Scores and softmax in float32
// with float64 row sums; outputs keep q's dtype and layout.
#pragma once

#include <optional>
#include <span>

#include "meshnn/ops/embedding.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

// q [B, Hq, S, D], k/v [B, Hkv, Skv, D] -> [B, Hq, S, D]. causal: query i sees keys
// j <= i + (Skv - S) (the queries are the last S positions; S == Skv is the usual triangle).
// scale defaults to 1/sqrt(D). Throws meshnn::Error for mismatched B/D/Skv, Hq % Hkv != 0, or
// causal with Skv < S.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    std::optional<float> scale = std::nullopt);

// q [1, B, Hq, D] against caches [B, Hkv, S_max, D]; user b attends to cache positions
// 0..positions[b] inclusive (its new token already written by update_cache). -> [1, B, Hq, D].
// The cache is read tile by tile in its stored format, only the positions in use, with an online
// softmax in float32 (the same core as attention_with_kv_cache below).
// Throws meshnn::Error for mismatched shapes or a position outside [0, S_max).
Tensor scaled_dot_product_attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                           std::span<const int64_t> positions,
                                           std::optional<float> scale = std::nullopt);

// Writes new_kv [1, B, Hkv, D] into cache [B, Hkv, S_max, D] at row positions[b] of user b, in
// place. Only the tiles holding those rows are re-encoded (block floats: a 16-value block never
// spans two rows, so the other rows keep their bits).
void update_cache(Tensor& cache, const Tensor& new_kv, std::span<const int64_t> positions);

// Prefill: writes kv [1, Hkv, S, D] into rows 0..S-1 of user `batch_index` of the cache.
void fill_cache(Tensor& cache, const Tensor& kv, int64_t batch_index);

// [B, 1, S, H*D] (or [B, S, H*D]) -> [B, H, S, D].
Tensor split_heads(const Tensor& x, int64_t num_heads);
// [B, H, S, D] -> [B, 1, S, H*D].
Tensor concat_heads(const Tensor& x);

// Fused QKV projection output [B, 1, S, (Hq + 2 Hkv) * D] -> q [B, Hq, S, D], k, v [B, Hkv, S, D]
// (columns ordered q heads, then k heads, then v heads).
struct QkvHeads {
  Tensor q, k, v;
};
QkvHeads split_qkv_heads(const Tensor& qkv, int64_t num_q_heads, int64_t num_kv_heads);
// Decode form: [1, 1, B, (Hq + 2 Hkv) * D] -> q [1, B, Hq, D], k, v [1, B, Hkv, D].
QkvHeads split_qkv_heads_decode(const Tensor& qkv, int64_t num_q_heads, int64_t num_kv_heads);
// Decode form of concat_heads: [1, B, H, D] -> [1, 1, B, H*D].
Tensor concat_heads_decode(const Tensor& x);

// Where q, k and v start in the columns of a fused QKV projection row: q heads at q_column, k heads
// at k_column, v heads at v_column, each head's D values contiguous. Separate starts let each part
// begin on a tile boundary, so weights of each part are concatenated whole tiles, never re-quantised.
struct QkvColumns {
  int64_t q_column = 0, k_column = 0, v_column = 0;
};

// One attention step of a decoder with a KV cache, the same for prefill and decode: row m of `qkv`
// ([..., M, W], float32 or bfloat16, any layout) is a token of cache slot slots[m] at position
// positions[m]. For every row: rotate-half RoPE (tables from make_rotary_tables) on its Hq query and
// Hkv key heads; its k and v written into row positions[m] of k_cache / v_cache [slots, Hkv, S_max, D]
// (TILE; float32, bfloat16 or bfloat8_b: the cache keeps its dtype); then each query head h attends,
// softmax(scale q k^T) v, over positions 0..positions[m] of its slot through KV head h / (Hq / Hkv);
// with a sliding_window_size (Mistral's sliding_window) only over that many of the latest of them,
// positions[m] - sliding_window_size + 1 .. positions[m].
// Every row's k/v is written before any row attends, so rows of one slot at increasing positions (a
// prefill chunk) see each other causally. The cache is read in its stored format, only the tiles
// that hold positions in use. Returns [1, 1, M, Hq * D] in out_dtype, TILE.
// Throws meshnn::Error for: sizes that disagree (W too narrow for the columns, cache shapes, D
// against the tables), Hq not a multiple of Hkv, a slot or position outside the cache or the
// rotary tables, two rows writing the same (slot, position), or a sliding_window_size <= 0.
Tensor attention_with_kv_cache(const Tensor& qkv, const QkvColumns& columns, Tensor& k_cache, Tensor& v_cache,
                               const RotaryTables& rope, std::span<const int64_t> slots,
                               std::span<const int64_t> positions, int64_t num_q_heads, DataType out_dtype,
                               std::optional<float> scale = std::nullopt,
                               std::optional<int64_t> sliding_window_size = std::nullopt);
// The same into `output` (reset to the result's shape, its storage kept when large enough; the tile
// padding rows are left unspecified). output must not be qkv.
void attention_with_kv_cache_into(const Tensor& qkv, const QkvColumns& columns, Tensor& k_cache, Tensor& v_cache,
                                  const RotaryTables& rope, std::span<const int64_t> slots,
                                  std::span<const int64_t> positions, int64_t num_q_heads, DataType out_dtype,
                                  Tensor& output, std::optional<float> scale = std::nullopt,
                                  std::optional<int64_t> sliding_window_size = std::nullopt);

}  // namespace meshnn
