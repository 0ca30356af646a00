// A Llama-family decoder (Hugging Face LlamaForCausalLM) on one tensor-parallel group of devices:
// the whole mesh in tp mode, one submesh in hybrid, one device in dp (see llm_job.hpp).
//
// Placements over the group's N devices (TT-NN's table for N300 / T3000):
//   embedding      replicated (ROW_MAJOR rows, looked up one token at a time)
//   q/k/v_proj     column-parallel, heads split: device d holds q heads [d Hq/N, (d+1) Hq/N) and the
//                  KV heads they read; when N > Hkv each KV head is replicated over N / Hkv devices
//                  (TT-NN's Llama-70B on Galaxy). Fused per device into one [hidden, q|k|v] weight
//                  whose parts start on tile boundaries. Qwen2's q/k/v biases: split as the
//                  weights' columns, fused alike, added by the matmul's epilogue (2d: on one mesh
//                  row only, since the rows' partial sums are added up).
//                  Qwen3's q_norm/k_norm ([head_dim], one for all heads): replicated, applied to
//                  each of the device's heads after the q|k|v sums are reduced, so no collective.
//   o_proj         row-parallel -> Partial(sum), all_reduce
//   gate/up_proj   column-parallel over intermediate (torch.chunk, padded), fused as [hidden, gate|up]
//   down_proj      row-parallel -> Partial(sum), all_reduce
//   norms          replicated (float32)
//   lm_head        column-parallel over the vocabulary: logits stay sharded (the sampler works on them)
//   KV cache       [slots, KV heads of this device, S_max, D]
// Partial sums are produced, reduced and added to the residual in float32.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/distributed/matmul.hpp"
#include "meshnn/models/llama/config.hpp"
#include "meshnn/ops/attention.hpp"
#include "meshnn/serving/causal_lm.hpp"

namespace meshnn::models::llama {

// tp: one tensor-parallel group (the table above). 2d (TT-NN's Llama on Galaxy): on an RxC mesh
// the hidden is also split, over the R mesh rows: column-parallel weights are [hidden/R, out/C]
// blocks whose partial sums are all_reduced along the mesh column (cluster_axis 0), row-parallel
// ones [in/C, hidden/R] all_reduced along the mesh row (cluster_axis 1); the residual stream is
// Shard(hidden) over the rows, RMSNorm adds its sums of squares along the column; every mesh row
// holds the same logits, sharded over its columns.
enum class LlamaSharding { TENSOR_PARALLEL, TWO_D };

struct LlamaOptions {
  DataType weight_dtype = DataType::BFLOAT16;  // float32, bfloat16, bfloat8_b or bfloat4_b
  DataType act_dtype = DataType::BFLOAT16;     // float32 or bfloat16
  Topology topology = Topology::RING;
  int num_links = 1;
  LlamaSharding sharding = LlamaSharding::TENSOR_PARALLEL;
  // Prefill passes (those asking logits of fewer rows than they hold) run the row-parallel
  // projections, o_proj and down_proj, with their reductions through distributed::matmul, which
  // plans the moves by `cost` (false: the hand-placed matmul + all_reduce; measured equal, see
  // docs/performance.md). Decode steps keep the hand-placed form: it reduces only the rows in use
  // (1/32 of the tiles for one user) and allocates nothing after the first step.
  bool planned_prefill = true;
  distributed::CostModel cost;
  // Positions the rotary tables cover: 0 for the config's max_position_embeddings, else this
  // rounded up to whole tiles of 32 (as a KV cache of it is), at most max_position_embeddings. A job
  // whose cache holds 8192 positions need not keep Llama 3.1's tables of 131072 (134 MB per device
  // in float32). A position past the tables is an error of the rotary embedding.
  int64_t max_positions = 0;
};

// How the heads split over a group of `devices` (pure; same on every rank).
struct HeadSplit {
  int64_t q_heads = 0, kv_heads = 0;  // per device
  int64_t kv_replicas = 1;            // devices sharing one KV head (N / Hkv when N > Hkv, else 1)
};
// Throws meshnn::Error naming the numbers when the heads cannot be split over `devices`.
HeadSplit split_heads_over(const LlamaConfig& config, int devices);

class LlamaModel final : public serving::CausalLm {
 public:
  // Loads every weight onto `group` (collective over it), each device reading only its shards.
  // Errors (a missing or misshapen dataset, NaN in weights, heads that cannot be split) are the
  // same on every rank of the group.
  static LlamaModel load(const std::string& file, const LlamaConfig& config, const MeshDevicePtr& group,
                         const LlamaOptions& options);

  const Tensor& forward(const serving::TokenBatch& batch, serving::KvCache& cache,
                       PhaseTimes& times) const override;
  serving::KvCache make_cache(int64_t slots, int64_t max_seq, DataType dtype) const override;
  serving::VocabShard vocab_shard() const override { return vocab_shard_; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  // The devices the logits are sharded over: the group in tp, this device's mesh row in 2d.
  const MeshDevicePtr& mesh() const override { return vocab_group_; }

  const LlamaConfig& config() const { return config_; }
  const HeadSplit& head_split() const { return heads_; }
  size_t weight_bytes() const;  // this device's weight storage
  // The bytes of the matmul weights (padding tiles included): what a decode step reads once per
  // token, whatever the batch; the memory-bandwidth floor of a decode step is this over the
  // read bandwidth.
  size_t matmul_weight_bytes() const;
  // The placements of the embedding, layer 0's weights and the logits, for the job's report.
  std::string describe() const;
  // With options.planned_prefill: the plan distributed::matmul runs for o_proj in a prefill pass
  // of `rows` rows (its explain()).
  std::string explain_planned_prefill(int64_t rows) const;

 private:
  struct Layer {
    Tensor input_norm, post_norm;  // float32 [hidden]
    Tensor wqkv;                   // [hidden, q|k|v], parts tile-aligned
    std::optional<Tensor> qkv_bias;  // float32 [q|k|v] as wqkv's columns; where this device adds them
    std::optional<Tensor> q_norm, k_norm;  // Qwen3: float32 [head_dim], the same for every head
    MeshTensor wo;                 // [q heads * D, hidden], row-parallel (local: this device's heads)
    Tensor w_gate_up;              // [hidden, 2 * gate_up_half]
    MeshTensor w_down;             // [intermediate, hidden], row-parallel
  };
  // The tensors of a forward pass, made by the first pass and reused by every later one (reset
  // within their storage), and the collectives' MeshTensor wrappers around them: a decode step
  // after the first allocates no tensor memory, as TT-NN's captured decode trace does not.
  struct StepBuffers {
    Tensor ids;                 // uint32 [1, 1, rows]
    Tensor embedded;            // 2d: the whole hidden of the looked-up rows
    Tensor x;                   // the residual stream [1, 1, rows, hidden chunk]
    Tensor normed;              // RMSNorm of x, the projections' input
    Tensor partial;             // a projection's output: partial sums (float32, TILE)
    Tensor packed, sum;         // their valid rows (ROW_MAJOR) and the all_reduce of those
    Tensor attention, mlp;      // attention output, silu(gate) * up
    Tensor picked;              // the rows whose logits are asked for, when not all are
    Tensor squares, squares_sum;  // 2d RMSNorm: per-row sums of squares, and their all_reduce
    std::vector<float> row;     // one row of values
  };
  // Which split a partial sum is reduced over: the hidden (2d: along the mesh column) or the heads
  // / intermediate / vocabulary (tp: the group; 2d: along the mesh row). Reduces step_.partial and
  // returns the sum, ROW_MAJOR (step_.partial itself, TILE, over one device): a step buffer, which
  // the caller may change in place.
  enum class Across { HIDDEN, HEADS };
  Tensor& reduce(Across across, PhaseTimes& times) const;
  // step_.partial = x times w (float32 out), plus bias when given.
  void project(const Tensor& x, const Tensor& w, PhaseTimes& times, const Tensor* bias = nullptr) const;
  // The reduced float32 sum of x times a row-parallel weight w [in, hidden], in the residual
  // stream's placement: project + reduce(HEADS), or (planned) distributed::matmul. `x` is a step
  // buffer, lent to a MeshTensor for the call.
  const Tensor& row_parallel(Tensor& x, const MeshTensor& w, bool planned, PhaseTimes& times) const;
  // The distributed::matmul plan of row_parallel for `rows` rows (explain() prints it).
  distributed::MatmulPlan row_parallel_plan(const MeshTensor& w, int64_t rows) const;
  distributed::DistributedMatmulOptions row_parallel_options() const;
  Placements row_parallel_input() const;  // of x: its in-dim (heads / intermediate) split
  // step_.normed = RMSNorm of x, rows of the residual stream's local hidden.
  void norm(const Tensor& x, const Tensor& weight, PhaseTimes& times) const;
  // step_.x = the embedding of the batch's tokens (2d: this mesh row's chunk of the hidden).
  void embed(const serving::TokenBatch& batch) const;

  LlamaConfig config_;
  LlamaOptions options_;
  MeshDevicePtr group_, vocab_group_;
  int hidden_parts_ = 1, hidden_index_ = 0, head_parts_ = 1, head_index_ = 0;
  int64_t hidden_chunk_ = 0;  // this device's width of the residual stream
  HeadSplit heads_;
  QkvColumns qkv_columns_;
  int64_t local_intermediate_ = 0, gate_up_half_ = 0;
  serving::VocabShard vocab_shard_;
  Tensor embedding_;   // [vocab, hidden] ROW_MAJOR, float32 or bfloat16
  std::vector<Layer> layers_;
  Tensor final_norm_;  // float32 [hidden]
  Tensor lm_head_;     // [hidden, local vocab]
  RotaryTables rope_;
  std::vector<std::string> placements_;  // report lines, made at load time
  mutable StepBuffers step_;             // forward is const to callers, and never reentrant
};

}  // namespace meshnn::models::llama
