#include "meshnn/models/llama/model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "meshnn/core/error.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/ops/eltwise.hpp"
#include "meshnn/ops/embedding.hpp"
#include "meshnn/ops/attention.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/ops/normalization.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/models/weight_placement.hpp"
#include "meshnn/tensor/rows.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::models::llama {
namespace {

// Parts of a fused weight, each padded to whole tiles so that concatenation copies tiles and
// never re-quantises a block-float block across two parts. The parts are taken, not copied, and
// freed once the fused weight exists: loading holds one layer's weights at most twice.
Tensor concat_tile_aligned(std::vector<Tensor> parts) {
  for (Tensor& p : parts)
    if (p.shape()[-1] % kTileWidth != 0) p = pad_to(p, -1, round_up_to_tile(p.shape()[-1]));
  return concat(parts, -1);
}

template <class... Parts>
std::vector<Tensor> take(Parts&&... parts) {
  std::vector<Tensor> taken;
  (taken.push_back(std::move(parts)), ...);
  return taken;
}

std::string placement_line(const std::string& name, const MeshTensor& t) {
  return fmt::format("  {:<34} {:<16} {:<10} {:<26} shard {}", name, t.shape().to_string(), to_string(t.dtype()),
                     to_string(t.placements()), t.shard_shape().to_string());
}

}  // namespace

HeadSplit split_heads_over(const LlamaConfig& c, int devices) {
  const int64_t hq = c.num_attention_heads, hkv = c.num_key_value_heads, n = devices;
  const bool kv_split = n <= hkv ? hkv % n == 0 : n % hkv == 0;
  MESHNN_CHECK(hq % n == 0 && kv_split,
               "cannot split {} attention heads and {} KV heads over {} devices: the device count must divide the "
               "attention heads, and divide the KV heads or be a multiple of them",
               hq, hkv, n);
  HeadSplit s;
  s.q_heads = hq / n;
  s.kv_heads = n <= hkv ? hkv / n : 1;
  s.kv_replicas = n <= hkv ? 1 : n / hkv;
  return s;
}

LlamaModel LlamaModel::load(const std::string& file, const LlamaConfig& config, const MeshDevicePtr& group,
                            const LlamaOptions& options) {
  trace::Scope phase("phase", "load weights");
  MESHNN_CHECK(options.act_dtype == DataType::FLOAT32 || options.act_dtype == DataType::BFLOAT16,
               "activations must be float32 or bfloat16, got {}", to_string(options.act_dtype));
  MESHNN_CHECK(options.weight_dtype == DataType::FLOAT32 || options.weight_dtype == DataType::BFLOAT16 ||
                   is_block_float(options.weight_dtype),
               "weights must be float32, bfloat16, bfloat8_b or bfloat4_b, got {}", to_string(options.weight_dtype));
  config.validate(file);
  // Weights stay for the whole job and are never sent: packed tight, not rounded to huge pages.
  const CompactBuffersScope compact;
  LlamaModel m;
  m.config_ = config;
  m.options_ = options;
  m.group_ = group;
  m.vocab_group_ = group;
  const bool two_d = options.sharding == LlamaSharding::TWO_D;
  // tp: hidden whole, heads over all N devices. 2d: hidden over the R mesh rows, heads over the C
  // mesh columns.
  m.hidden_parts_ = two_d ? group->num_rows() : 1;
  m.hidden_index_ = two_d ? group->axis_position(0) : 0;
  m.head_parts_ = two_d ? group->num_cols() : group->num_devices();
  m.head_index_ = two_d ? group->axis_position(1) : group->device_id();
  m.heads_ = split_heads_over(config, m.head_parts_);
  const int64_t hidden = config.hidden_size, d = config.head_dim, inter = config.intermediate_size;
  const int64_t hq = config.num_attention_heads, hkv = config.num_key_value_heads, vocab = config.vocab_size;
  m.hidden_chunk_ = (hidden + m.hidden_parts_ - 1) / m.hidden_parts_;

  // Placements of the [in, out] (transposed) weights (models/weight_placement.hpp): q, k, v, gate
  // and up column-parallel (out split over the head parts), o and down row-parallel; the norms
  // are hidden vectors.
  const ParallelMode mode = two_d ? ParallelMode::TWO_D : ParallelMode::TP;
  const MeshMapperConfig column_parallel = weight_mapper(mode, WeightRole::COLUMN_PARALLEL);
  const MeshMapperConfig row_parallel = weight_mapper(mode, WeightRole::ROW_PARALLEL);
  const MeshMapperConfig hidden_vector = weight_mapper(mode, WeightRole::HIDDEN_VECTOR);

  // Linear weights are stored [out, in] and loaded transposed to [in, out].
  auto load_linear = [&](const std::string& key, int64_t out, int64_t in, const MeshMapperConfig& mapper,
                         const MeshDevicePtr& mesh) {
    io::LoadOptions o{options.weight_dtype, Layout::TILE, /*transpose=*/true};
    o.expected_shape = std::vector<int64_t>{out, in};
    return io::load_tensor(file, key, mapper, mesh, o);
  };
  // Biases are read whole on every device (they are small), each keeping its own columns.
  auto load_bias = [&](const std::string& key, int64_t width) {
    io::LoadOptions o{DataType::FLOAT32, Layout::ROW_MAJOR, false};
    o.expected_shape = std::vector<int64_t>{width};
    return io::load_tensor(file, key, ReplicateTensorToMesh(), group, o);
  };
  auto load_norm = [&](const std::string& key) {
    io::LoadOptions o{DataType::FLOAT32, Layout::ROW_MAJOR, false};
    o.expected_shape = std::vector<int64_t>{hidden};
    return io::load_tensor(file, key, hidden_vector, group, o);
  };
  // Qwen3's per-head norms weigh the head_dim columns of every head alike: whole on every device.
  auto load_head_norm = [&](const std::string& key) {
    io::LoadOptions o{DataType::FLOAT32, Layout::ROW_MAJOR, false};
    o.expected_shape = std::vector<int64_t>{d};
    return std::move(io::load_tensor(file, key, ReplicateTensorToMesh(), group, o).local());
  };

  {
    const DataType table_dtype = options.weight_dtype == DataType::FLOAT32 ? DataType::FLOAT32 : DataType::BFLOAT16;
    io::LoadOptions o{table_dtype, Layout::ROW_MAJOR, false};
    o.expected_shape = std::vector<int64_t>{vocab, hidden};
    MeshTensor table = io::load_tensor(file, embed_tokens_key(), ReplicateTensorToMesh(), group, o);
    m.placements_.push_back(placement_line("embedding", table));
    m.embedding_ = std::move(table.local());
  }

  // KV heads. When the head parts outnumber the KV heads, each KV head is replicated over
  // kv_replicas devices. tp loads them through a {Hkv, replicas} view of the group, whose mesh rows
  // are those devices (device d holds KV head d / replicas); 2d loads its rows' hidden chunk of
  // every KV head and keeps its own head's columns.
  MeshDevicePtr kv_mesh = group;
  MeshMapperConfig kv_mapper = column_parallel;
  const bool kv_replicated = m.heads_.kv_replicas > 1;
  if (kv_replicated && !two_d) {
    kv_mesh = MeshDevice::open({static_cast<int>(hkv), static_cast<int>(m.heads_.kv_replicas)}, group->topology(),
                               group->comm());
    kv_mapper = ShardTensor2dMesh(1, std::nullopt);
  } else if (kv_replicated) {
    kv_mapper = ShardTensor2dMesh(0, std::nullopt, true);
  }
  const int64_t my_kv_head = m.head_index_ / m.heads_.kv_replicas;
  auto own_kv_heads = [&](MeshTensor& t) {
    return kv_replicated && two_d ? slice(t.local(), -1, my_kv_head * d, (my_kv_head + 1) * d) : std::move(t.local());
  };
  m.qkv_columns_.k_column = round_up_to_tile(m.heads_.q_heads * d);
  m.qkv_columns_.v_column = m.qkv_columns_.k_column + round_up_to_tile(m.heads_.kv_heads * d);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    Layer layer;
    layer.input_norm = std::move(load_norm(layer_key(l, "input_layernorm.weight")).local());
    layer.post_norm = std::move(load_norm(layer_key(l, "post_attention_layernorm.weight")).local());
    MeshTensor q = load_linear(layer_key(l, "self_attn.q_proj.weight"), hq * d, hidden, column_parallel, group);
    MeshTensor k = load_linear(layer_key(l, "self_attn.k_proj.weight"), hkv * d, hidden, kv_mapper, kv_mesh);
    MeshTensor v = load_linear(layer_key(l, "self_attn.v_proj.weight"), hkv * d, hidden, kv_mapper, kv_mesh);
    MeshTensor o = load_linear(layer_key(l, "self_attn.o_proj.weight"), hidden, hq * d, row_parallel, group);
    MeshTensor gate = load_linear(layer_key(l, "mlp.gate_proj.weight"), inter, hidden, column_parallel, group);
    MeshTensor up = load_linear(layer_key(l, "mlp.up_proj.weight"), inter, hidden, column_parallel, group);
    MeshTensor down = load_linear(layer_key(l, "mlp.down_proj.weight"), hidden, inter, row_parallel, group);
    m.local_intermediate_ = gate.shard_shape()[-1];
    m.gate_up_half_ = round_up_to_tile(m.local_intermediate_);
    if (l == 0) {
      for (const auto& [name, t] : {std::pair{"layer 0 q_proj (transposed)", &q}, {"layer 0 k_proj", &k},
                                    {"layer 0 v_proj", &v}, {"layer 0 o_proj", &o}, {"layer 0 gate_proj", &gate},
                                    {"layer 0 up_proj", &up}, {"layer 0 down_proj", &down}})
        m.placements_.push_back(placement_line(name, *t));
      if (kv_replicated)
        m.placements_.push_back(fmt::format(
            "  (each KV head on {} devices; {})", m.heads_.kv_replicas,
            two_d ? "k/v above are each row's hidden chunk of all KV heads, of which a device keeps its own"
                  : fmt::format("k/v placements are over a {}x{} view of the group", hkv, m.heads_.kv_replicas)));
    }
    layer.wqkv = concat_tile_aligned(take(std::move(q.local()), own_kv_heads(k), own_kv_heads(v)));
    if (config.qkv_bias) {
      const MeshTensor q_bias = load_bias(layer_key(l, "self_attn.q_proj.bias"), hq * d);
      const MeshTensor k_bias = load_bias(layer_key(l, "self_attn.k_proj.bias"), hkv * d);
      const MeshTensor v_bias = load_bias(layer_key(l, "self_attn.v_proj.bias"), hkv * d);
      if (l == 0)
        m.placements_.push_back(fmt::format("  {:<34} [{}], [{}], [{}] float32: each device keeps its heads' values",
                                            "layer 0 q/k/v_proj biases", hq * d, hkv * d, hkv * d));
      // 2d: the mesh rows' partial sums of q|k|v are added up, so one row adds the biases.
      if (m.hidden_index_ == 0) {
        const int64_t q_width = m.heads_.q_heads * d, kv_width = m.heads_.kv_heads * d;
        const int64_t q_first = m.head_index_ * q_width;
        const int64_t kv_first = kv_replicated ? my_kv_head * d : m.head_index_ * kv_width;
        std::vector<float> fused(static_cast<size_t>(layer.wqkv.shape()[-1]), 0.0f);  // 0 in the tile padding
        auto place = [&](const MeshTensor& bias, int64_t first, int64_t width, int64_t column) {
          const float* values = bias.local().data<float>() + first;
          std::copy(values, values + width, fused.begin() + column);
        };
        place(q_bias, q_first, q_width, 0);
        place(k_bias, kv_first, kv_width, m.qkv_columns_.k_column);
        place(v_bias, kv_first, kv_width, m.qkv_columns_.v_column);
        layer.qkv_bias = Tensor::from_float(fused, Shape{layer.wqkv.shape()[-1]}, DataType::FLOAT32, Layout::ROW_MAJOR);
      }
    }
    if (config.qk_norm) {
      layer.q_norm = load_head_norm(layer_key(l, "self_attn.q_norm.weight"));
      layer.k_norm = load_head_norm(layer_key(l, "self_attn.k_norm.weight"));
      if (l == 0)
        m.placements_.push_back(fmt::format("  {:<34} [{}] float32 each: whole on every device, applied to each head",
                                            "layer 0 q_norm, k_norm", d));
    }
    layer.w_gate_up = concat_tile_aligned(take(std::move(gate.local()), std::move(up.local())));
    layer.wo = std::move(o);
    layer.w_down = std::move(down);
    m.layers_.push_back(std::move(layer));
  }
  m.final_norm_ = std::move(load_norm(final_norm_key()).local());
  MeshTensor head = load_linear(config.tie_word_embeddings ? embed_tokens_key() : lm_head_key(), vocab, hidden,
                                column_parallel, group);
  m.placements_.push_back(placement_line(config.tie_word_embeddings ? "lm_head (tied to embedding)" : "lm_head", head));
  const int64_t chunk = head.shard_shape()[-1];
  m.lm_head_ = std::move(head.local());
  m.vocab_shard_.offset = chunk * m.head_index_;
  m.vocab_shard_.valid = std::clamp<int64_t>(vocab - m.vocab_shard_.offset, 0, chunk);
  // 2d: every mesh row holds the same logits, sharded over its columns; each row samples alone.
  if (two_d) m.vocab_group_ = group->create_submeshes({1, group->num_cols()}).mine;
  MESHNN_CHECK(options.max_positions >= 0, "llama: max_positions must be >= 0, got {}", options.max_positions);
  const int64_t positions = options.max_positions > 0
                                ? std::min(round_up_to_tile(options.max_positions), config.max_position_embeddings)
                                : config.max_position_embeddings;
  m.rope_ = make_rotary_tables(rope_inverse_frequencies(config), positions,
                               config.rope_scaling.attention_factor);
  return m;
}

serving::KvCache LlamaModel::make_cache(int64_t slots, int64_t max_seq, DataType dtype) const {
  return serving::KvCache(config_.num_hidden_layers, slots, heads_.kv_heads, max_seq, config_.head_dim, dtype);
}

// Partial sums are float32: they are reduced and added to the residual in float32.
void LlamaModel::project(const Tensor& x, const Tensor& w, PhaseTimes& times, const Tensor* bias) const {
  MatmulOptions o;
  o.output_dtype = DataType::FLOAT32;
  timed(times.matmul, [&] {
    if (bias != nullptr)
      linear_into(x, w, bias, Activation::NONE, step_.partial, o);
    else
      matmul_into(x, w, step_.partial, false, false, o);
  });
}

Tensor& LlamaModel::reduce(Across across, PhaseTimes& times) const {
  const bool two_d = options_.sharding == LlamaSharding::TWO_D;
  const int parts = across == Across::HIDDEN ? hidden_parts_ : head_parts_;
  if (parts == 1) return step_.partial;
  timed(times.communication, [&] {
    // tp: every device of the group holds a partial sum of the whole tensor. 2d: partial along one
    // mesh axis, and along the other each device holds another slice of the last dim (heads after
    // a hidden reduction, hidden after a heads reduction).
    Shape global = step_.partial.shape();
    std::optional<int> cluster_axis;
    Placements placements{Partial{}, Partial{}};
    if (two_d) {
      cluster_axis = across == Across::HIDDEN ? 0 : 1;
      global[-1] *= *cluster_axis == 0 ? head_parts_ : hidden_parts_;
      placements = *cluster_axis == 0 ? Placements{Partial{}, Shard{-1}} : Placements{Shard{-1}, Partial{}};
    }
    // Only the valid rows travel: a decode step's partial sums fill one row of each 32-row tile,
    // so they are packed into ROW_MAJOR rows first, 1/32 of the tiles' bytes. The buffers are lent
    // to the MeshTensors for the call and taken back after it.
    const int64_t rows = step_.partial.volume() / step_.partial.shape()[-1], width = step_.partial.shape()[-1];
    step_.packed.reset(step_.partial.shape(), DataType::FLOAT32, Layout::ROW_MAJOR);
    for (int64_t r = 0; r < rows; ++r) read_row(step_.partial, r, step_.packed.data<float>() + r * width);
    step_.sum.reset(step_.packed.shape(), DataType::FLOAT32, Layout::ROW_MAJOR);
    MeshTensor in(group_, global, placements, std::move(step_.packed));
    Placements reduced = in.placements();
    for (int axis = 0; axis < 2; ++axis)
      if (!cluster_axis || axis == *cluster_axis) reduced[static_cast<size_t>(axis)] = Replicate{};
    MeshTensor out(group_, global, reduced, std::move(step_.sum));
    all_reduce_into(in, out, ReduceOp::SUM, cluster_axis, options_.topology, options_.num_links);
    step_.packed = std::move(in.local());
    step_.sum = std::move(out.local());
  });
  return step_.sum;
}

Placements LlamaModel::row_parallel_input() const {
  // tp: heads (or intermediate) over the whole group; 2d: over the mesh columns, whole on each row.
  if (options_.sharding == LlamaSharding::TWO_D) return {Replicate{}, Shard{-1}};
  return {Shard{-1}, Shard{-1}};
}

distributed::DistributedMatmulOptions LlamaModel::row_parallel_options() const {
  distributed::DistributedMatmulOptions o;
  // The residual stream's placement: whole on every device (tp), the hidden over the mesh rows (2d).
  o.output_placements = options_.sharding == LlamaSharding::TWO_D ? Placements{Shard{-1}, Replicate{}}
                                                                  : Placements{Replicate{}, Replicate{}};
  o.output_dtype = DataType::FLOAT32;  // the partial sums are reduced in float32, as hand-placed
  o.cost = options_.cost;
  return o;
}

distributed::MatmulPlan LlamaModel::row_parallel_plan(const MeshTensor& w, int64_t rows) const {
  return distributed::plan_matmul(Shape{1, 1, rows, w.shape()[0]}, options_.act_dtype, Layout::TILE,
                                  row_parallel_input(), w.shape(), w.dtype(), w.layout(), w.placements(),
                                  group_->shape(), row_parallel_options());
}

std::string LlamaModel::explain_planned_prefill(int64_t rows) const {
  return row_parallel_plan(layers_.front().wo, rows).explain();
}

const Tensor& LlamaModel::row_parallel(Tensor& x, const MeshTensor& w, bool planned, PhaseTimes& times) const {
  if (!planned) {
    project(x, w.local(), times);
    return reduce(Across::HEADS, times);
  }
  // The product counts as matmul time, the operands' and the output's moves as communication.
  const int64_t rows = x.shape()[-2];
  const distributed::DistributedMatmulOptions o = row_parallel_options();
  const distributed::MatmulPlan plan = row_parallel_plan(w, rows);
  MeshTensor a(group_, Shape{1, 1, rows, w.shape()[0]}, row_parallel_input(), std::move(x));
  MeshTensor moved_a, moved_w;
  const MeshTensor *xa = nullptr, *xw = nullptr;
  timed(times.communication, [&] {
    xa = &distributed::plan_operand(a, plan.a, moved_a);
    xw = &distributed::plan_operand(w, plan.b, moved_w);
  });
  const MeshTensor product = timed(times.matmul, [&] { return distributed::plan_product(*xa, *xw, plan, o); });
  MeshTensor sum = timed(times.communication, [&] { return distributed::plan_output(product, plan, o); });
  x = std::move(a.local());
  step_.sum = std::move(sum.local());
  return step_.sum;
}

void LlamaModel::norm(const Tensor& x, const Tensor& weight, PhaseTimes& times) const {
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (hidden_parts_ == 1) {
    rms_norm_into(x, eps, &weight, step_.normed);
    return;
  }
  // The hidden is split over the mesh rows: each row's sum of squares, one small all_reduce along
  // the mesh column, then each device scales its chunk (padding columns are 0 and add nothing).
  const int64_t rows = x.shape()[-2], width = x.shape()[-1];
  std::vector<float>& values = step_.row;
  values.resize(static_cast<size_t>(width));
  const Shape sums_shape{1, rows};
  step_.squares.reset(sums_shape, DataType::FLOAT32, Layout::ROW_MAJOR);
  for (int64_t r = 0; r < rows; ++r) {
    read_row(x, r, values.data());
    double sq = 0;
    for (int64_t i = 0; i < width; ++i) sq += static_cast<double>(values[i]) * values[i];
    step_.squares.data<float>()[r] = static_cast<float>(sq);
  }
  timed(times.communication, [&] {
    step_.squares_sum.reset(sums_shape, DataType::FLOAT32, Layout::ROW_MAJOR);
    MeshTensor in(group_, sums_shape, {Partial{}, Replicate{}}, std::move(step_.squares));
    MeshTensor out(group_, sums_shape, {Replicate{}, Replicate{}}, std::move(step_.squares_sum));
    all_reduce_into(in, out, ReduceOp::SUM, 0, options_.topology, options_.num_links);
    step_.squares = std::move(in.local());
    step_.squares_sum = std::move(out.local());
  });
  const float* total = step_.squares_sum.data<float>();
  const float* g = weight.data<float>();
  step_.normed.reset(x.shape(), x.dtype(), x.layout());
  for (int64_t r = 0; r < rows; ++r) {
    read_row(x, r, values.data());
    const double inv = 1.0 / std::sqrt(static_cast<double>(total[r]) / config_.hidden_size + eps);
    for (int64_t i = 0; i < width; ++i) values[i] = static_cast<float>(values[i] * inv * g[i]);
    write_row(step_.normed, r, values.data());
  }
}

void LlamaModel::embed(const serving::TokenBatch& b) const {
  const int64_t rows = static_cast<int64_t>(b.tokens.size());
  step_.ids.reset(Shape{1, 1, rows}, DataType::UINT32, Layout::ROW_MAJOR);
  std::copy(b.tokens.begin(), b.tokens.end(), step_.ids.data<uint32_t>());
  const DataType act = options_.act_dtype;
  if (hidden_parts_ == 1) {
    embedding_into(step_.ids, embedding_, step_.x, act, Layout::TILE);
    return;
  }
  // 2d: this mesh row's chunk of the hidden, zero-padded to whole chunks.
  embedding_into(step_.ids, embedding_, step_.embedded, DataType::FLOAT32, Layout::ROW_MAJOR);
  const int64_t hidden = config_.hidden_size;
  const int64_t begin = std::min(hidden, hidden_index_ * hidden_chunk_), end = std::min(hidden, begin + hidden_chunk_);
  std::vector<float>& chunk = step_.row;
  chunk.assign(static_cast<size_t>(hidden_chunk_), 0.0f);
  step_.x.reset(Shape{1, 1, rows, hidden_chunk_}, act, Layout::TILE);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(step_.embedded.data<float>() + r * hidden + begin, step_.embedded.data<float>() + r * hidden + end,
              chunk.begin());
    write_row(step_.x, r, chunk.data());
  }
}

const Tensor& LlamaModel::forward(const serving::TokenBatch& b, serving::KvCache& cache, PhaseTimes& times) const {
  const int64_t rows = static_cast<int64_t>(b.tokens.size());
  MESHNN_CHECK(rows > 0 && b.slots.size() == b.tokens.size() && b.positions.size() == b.tokens.size(),
               "llama forward: {} tokens need as many slots and positions (got {} and {})", rows, b.slots.size(),
               b.positions.size());
  MESHNN_CHECK(cache.layers() == config_.num_hidden_layers, "llama forward: the cache has {} layers, the model {}",
               cache.layers(), config_.num_hidden_layers);
  for (int32_t t : b.tokens)
    MESHNN_CHECK(t >= 0 && t < config_.vocab_size, "llama forward: token id {} is outside the vocabulary [0, {})", t,
                 config_.vocab_size);
  for (int64_t r : b.logit_rows)
    MESHNN_CHECK(r >= 0 && r < rows, "llama forward: logit row {} is outside the batch of {}", r, rows);
  const auto start = std::chrono::steady_clock::now();
  const double communication_before = times.communication;
  const DataType act = options_.act_dtype;

  // Logits only for the rows asked for: a prefill pass needs the last row of each prompt, a decode
  // step every row.
  bool all_rows = static_cast<int64_t>(b.logit_rows.size()) == rows;
  for (size_t i = 0; all_rows && i < b.logit_rows.size(); ++i) all_rows = b.logit_rows[i] == static_cast<int64_t>(i);
  const bool planned = options_.planned_prefill && !all_rows;

  embed(b);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    norm(step_.x, layer.input_norm, times);
    project(step_.normed, layer.wqkv, times, layer.qkv_bias ? &*layer.qkv_bias : nullptr);
    Tensor& qkv = reduce(Across::HIDDEN, times);
    if (layer.q_norm) {
      // Qwen3: each query and key head normalised on its own, before attention applies RoPE.
      const float eps = static_cast<float>(config_.rms_norm_eps);
      rms_norm_heads_in_place(qkv, 0, heads_.q_heads, *layer.q_norm, eps);
      rms_norm_heads_in_place(qkv, qkv_columns_.k_column, heads_.kv_heads, *layer.k_norm, eps);
    }
    attention_with_kv_cache_into(qkv, qkv_columns_, cache.keys(static_cast<int64_t>(l)),
                                 cache.values(static_cast<int64_t>(l)), rope_, b.slots, b.positions, heads_.q_heads,
                                 act, step_.attention, std::nullopt, config_.sliding_window);
    add_into(step_.x, row_parallel(step_.attention, layer.wo, planned, times), step_.x);
    norm(step_.x, layer.post_norm, times);
    project(step_.normed, layer.w_gate_up, times);
    swiglu_into(reduce(Across::HIDDEN, times), gate_up_half_, local_intermediate_, act, step_.mlp);
    add_into(step_.x, row_parallel(step_.mlp, layer.w_down, planned, times), step_.x);
  }

  if (!all_rows) {
    const int64_t h = step_.x.shape()[-1];
    step_.row.resize(static_cast<size_t>(h));
    step_.picked.reset(Shape{1, 1, static_cast<int64_t>(b.logit_rows.size()), h}, act, Layout::TILE);
    for (size_t i = 0; i < b.logit_rows.size(); ++i) {
      read_row(step_.x, b.logit_rows[i], step_.row.data());
      write_row(step_.picked, static_cast<int64_t>(i), step_.row.data());
    }
  }
  norm(all_rows ? step_.x : step_.picked, final_norm_, times);
  project(step_.normed, lm_head_, times);
  const Tensor& logits = reduce(Across::HIDDEN, times);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  times.compute += total - (times.communication - communication_before);
  return logits;
}

size_t LlamaModel::matmul_weight_bytes() const {
  size_t total = lm_head_.size_bytes();
  for (const Layer& l : layers_) total += l.wqkv.size_bytes() + l.wo.local().size_bytes() + l.w_gate_up.size_bytes() + l.w_down.local().size_bytes();
  return total;
}

size_t LlamaModel::weight_bytes() const {
  size_t total = embedding_.size_bytes() + final_norm_.size_bytes() + lm_head_.size_bytes();
  for (const Layer& l : layers_)
    total += l.input_norm.size_bytes() + l.post_norm.size_bytes() + l.wqkv.size_bytes() + l.wo.local().size_bytes() +
             l.w_gate_up.size_bytes() + l.w_down.local().size_bytes() + (l.qkv_bias ? l.qkv_bias->size_bytes() : 0) +
             (l.q_norm ? l.q_norm->size_bytes() + l.k_norm->size_bytes() : 0);
  return total;
}

std::string LlamaModel::describe() const {
  std::string out = fmt::format(
      "Llama: {} layers, hidden {}, intermediate {}, {} heads / {} KV heads of {}, vocab {}, on {} device(s) of a {} "
      "group{}: {} q heads and {} KV head(s) per device{}\n",
      config_.num_hidden_layers, config_.hidden_size, config_.intermediate_size, config_.num_attention_heads,
      config_.num_key_value_heads, config_.head_dim, config_.vocab_size, group_->num_devices(),
      group_->shape().to_string(),
      hidden_parts_ > 1 ? fmt::format(" (2d: hidden over {} mesh rows, heads over {} mesh columns)", hidden_parts_,
                                      head_parts_)
                        : "",
      heads_.q_heads, heads_.kv_heads,
      heads_.kv_replicas > 1 ? fmt::format(" (each KV head replicated on {} devices)", heads_.kv_replicas) : "");
  const RopeScaling& scaling = config_.rope_scaling;
  std::string rope = fmt::format("theta {}, tables of {} of the model's {} positions", config_.rope_theta,
                                 rope_.cos.shape()[0], config_.max_position_embeddings);
  if (scaling.type == RopeScaling::Type::LONGROPE)  // its factor lists would fill the screen
    rope += fmt::format(", rope_scaling longrope (attention factor {:.6f}) with its {} factors: sequences {} the "
                        "original {} positions",
                        scaling.attention_factor, scaling.use_long_factors ? "long" : "short",
                        scaling.use_long_factors ? "may run past" : "stay within",
                        scaling.original_max_position_embeddings);
  else if (scaling.type != RopeScaling::Type::DEFAULT)
    rope += ", rope_scaling " + rope_scaling_to_json(scaling);
  out += fmt::format("  {:<34} {}\n", "rotary embeddings", rope);
  for (const std::string& line : placements_) out += line + "\n";
  return out;
}

}  // namespace meshnn::models::llama
