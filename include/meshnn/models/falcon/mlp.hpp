// The Falcon-7B MLP (dense_h_to_4h -> exact GELU -> dense_4h_to_h, no bias) on a mesh, in the
// parallel patterns of TT-NN's LLM guide (docs/spec/semantics.md §5):
//
//   dp      x Shard(batch) over all devices, weights replicated; no communication.
//   tp      FF1 column-parallel (W1 Shard(N)), GELU local, FF2 row-parallel (W2 Shard(K)) giving
//           Partial(sum) outputs, finished by reduce_scatter (output Shard(hidden)) or all_reduce
//           (output replicated). The all_gather variant of TT-NN's tutorial splits both linears by
//           columns with an all_gather of the intermediate activation between them. The planned
//           variant leaves FF2 to distributed::matmul: asked for the reduce_scatter variant's
//           output placements, its planner picks the moves by the cost model in MlpOptions.
//   2d      RxC mesh: x Shard(hidden) over mesh rows; W1 blocks [H/R, I/C], W2 blocks [I/C, H/R].
//           FF1 partial sums are all_reduced along cluster_axis 0, GELU local, FF2 partial sums
//           all_reduced along cluster_axis 1: the output is placed like the input.
//   hybrid  the mesh's rows are data-parallel replicas (submeshes 1xC, batch split over them),
//           each running tp over its C devices.
//
// Partial sums are produced in float32 and reduced in float32; they are cast to the activation
// dtype once, after the reduction.
#pragma once

#include <string>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/models/parallel.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/distributed/matmul.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn::models::falcon {

// How tp (and hybrid) finishes the row-parallel FF2, or the column-column variant.
enum class TpVariant { REDUCE_SCATTER, ALL_REDUCE, ALL_GATHER, PLANNED };
std::string_view to_string(TpVariant v);  // "reduce_scatter", "all_reduce", "all_gather", "planned"
TpVariant parse_tp_variant(std::string_view name);

struct MlpOptions {
  ParallelMode mode = ParallelMode::TP;
  TpVariant tp_variant = TpVariant::REDUCE_SCATTER;
  DataType weight_dtype = DataType::BFLOAT16;
  DataType act_dtype = DataType::BFLOAT16;
  Topology topology = Topology::RING;
  int num_links = 1;
  distributed::CostModel cost;  // the planned variant's: the built-in model unless one calibrated on the mesh is loaded
};

class FalconMlp {
 public:
  // Loads the two weights of `layer` (-1: a bare MLP block) from `file` into the placements the
  // mode needs, each rank reading only its shards. Checks the shapes against the root attributes
  // hidden_size / intermediate_size. Collective over `mesh`; errors are the same on every rank.
  static FalconMlp load(const std::string& file, int layer, const MeshDevicePtr& mesh, const MlpOptions& options);

  // How the input x [batch, seq, hidden] (or [batch, 1, seq, hidden]) must be placed on the mesh
  // passed to load() (padding allowed on the batch).
  MeshMapperConfig input_mapper() const;

  // y = FF2(GELU(FF1(x))) for x placed by input_mapper(); the result's placements depend on the
  // mode (full_tensor() composes any of them). Adds this rank's phase times to `times`.
  MeshTensor forward(const MeshTensor& x, PhaseTimes& times) const;

  int64_t hidden_size() const { return hidden_; }
  int64_t intermediate_size() const { return intermediate_; }
  const MeshTensor& w1() const { return w1_; }  // [hidden, intermediate], as placed
  const MeshTensor& w2() const { return w2_; }  // [intermediate, hidden], as placed
  const MeshDevicePtr& compute_mesh() const { return compute_mesh_; }  // the submesh in hybrid mode
  // Bytes of weight shards this rank holds.
  size_t weight_bytes() const { return w1_.local().size_bytes() + w2_.local().size_bytes(); }
  std::string describe() const;  // placements of x, W1, W2 and y, for the job's report
  // The planned variant's FF2 plan for an input of x_shape (distributed::MatmulPlan::explain()
  // prints it). A dry run: no data, no communication.
  distributed::MatmulPlan ff2_plan(const Shape& x_shape) const;

 private:
  MeshTensor forward_dp(const MeshTensor& x, PhaseTimes& t) const;
  MeshTensor forward_tp(const MeshTensor& x, PhaseTimes& t) const;
  MeshTensor ff2_planned(const MeshTensor& h, const Shape& out_shape, PhaseTimes& t) const;
  distributed::DistributedMatmulOptions ff2_options() const;
  MeshTensor forward_2d(const MeshTensor& x, PhaseTimes& t) const;

  MlpOptions options_;
  MeshDevicePtr mesh_;          // the mesh the job opened
  MeshDevicePtr compute_mesh_;  // == mesh_, or this rank's tp submesh (hybrid)
  int replica_ = 0, replicas_ = 1;
  int64_t hidden_ = 0, intermediate_ = 0;
  MeshTensor w1_, w2_;
};

// The single-device result: y = GELU(x W1) W2 with float32 accumulation, where x is the full input
// [.., hidden] (float32 values) and w1/w2 full tensors [hidden, inter] / [inter, hidden] in any dtype.
Tensor falcon_mlp_reference(const Tensor& x, const Tensor& w1, const Tensor& w2, DataType act_dtype);

}  // namespace meshnn::models::falcon
