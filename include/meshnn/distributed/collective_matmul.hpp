// Collective matmuls (TT-NN's all_gather_matmul and matmul_reduce_scatter): a collective fused with
// the local product around it, so that the product of the part that has arrived runs while the rest
// travels. Megatron's sequence parallelism is the use: activations split on the sequence (rows)
// are gathered into a column-parallel linear, and a row-parallel linear's partial sums are
// scattered back onto the sequence.
//
// What CollectiveMatmulOptions::fused = false runs is the unfused pair (the collective, then
// ops::matmul on the whole result). Split on rows (or a batch dim), the fused forms give its bits:
// the products of row blocks are the rows of the whole product (the kernels compute rows
// independently; a block whose rows would take another kernel path than the whole, e.g. the bf16
// path's 4-row threshold, makes the call run unfused), and reductions keep the ring's fixed order.
// But each row block multiplies the whole of b, so b is read once per block. all_gather_matmul
// split on the contraction dim (TT-NN's case) reads each of b's rows once, with its chunk of A;
// its float32 sums then run in another order than the unfused product's (differences within
// float32 rounding; the order is the schedule's, the same on every run).
#pragma once

#include <optional>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn::distributed {

struct CollectiveMatmulOptions {
  std::optional<DataType> output_dtype;  // default: A's dtype
  std::optional<Topology> topology;      // default: the mesh's
  int num_links = 1;
  CclOptions ccl;
  bool fused = true;  // false: the collective, then the product (the reference and the baseline)
};

struct AllGatherMatmulResult {
  MeshTensor gathered;  // all_gather(a, dim, cluster_axis)
  MeshTensor product;   // gathered @ b, on every device its local product
};

// all_gather(a, dim) along cluster_axis, then the local product with b: a is Shard(dim) on the
// group's axes, where dim is A's contraction dim (rank - 1: fused when each chunk is whole tiles
// and b one matrix), its row dim (rank - 2) or a batch dim that b lacks or broadcasts (size 1);
// a's placements after the gather and b's must multiply where they are (distributed/matmul.hpp's
// rules, e.g. b Replicate or Shard(N) on the gathered axis). The product's placements follow those
// rules. Every argument problem is the same meshnn::Error on every rank before any message moves.
AllGatherMatmulResult all_gather_matmul(const MeshTensor& a, const MeshTensor& b, int dim,
                                        std::optional<int> cluster_axis = {},
                                        const CollectiveMatmulOptions& options = {});

// The local product of operands split on the contraction dim along cluster_axis (A Shard(K) and
// B Shard(K), or A Partial and B Replicate: partial sums), reduce_scattered (SUM) on `dim` of the
// product, its row dim or a batch dim of A that b broadcasts. Partial sums stay float32 until the
// reduction and are quantised once, to options.output_dtype. Fused: the product's slice for each
// member is computed just before the ring needs it, while earlier slices travel.
MeshTensor matmul_reduce_scatter(const MeshTensor& a, const MeshTensor& b, int dim, std::optional<int> cluster_axis = {},
                                 const CollectiveMatmulOptions& options = {});

}  // namespace meshnn::distributed
