// Collectives on mesh tensors (TT-NN's ttnn.all_gather / reduce_scatter / all_reduce, and
// all_to_all).
//
// Group: with cluster_axis = 0 the devices of this rank's mesh column, = 1 those of its mesh row,
// each ordered by coordinate along the axis; with no cluster_axis the whole mesh in row-major
// order (on a 1xN or Nx1 mesh that is the non-trivial axis). N = devices in the group.
// `dim` is a tensor dim (negative counts from the end). Every dtype (float32, bfloat16, bfloat8_b,
// bfloat4_b, int32, uint32) and both layouts.
//
// Placements (docs/spec/semantics.md §2-3), on the group's axes (both axes when there is no cluster_axis):
//  all_gather      input Shard(dim) (or Replicate: then N copies are concatenated and the global
//                  shape grows) -> Replicate. Local shape[dim] becomes N times larger.
//  reduce_scatter  input Partial(op) or Replicate (each device contributes its own tensor) ->
//                  Shard(dim). Local shape[dim] becomes N times smaller.
//  all_reduce      input Partial(op) or Replicate -> Replicate. Same shape.
//  all_to_all      input Shard(in_dim) -> Shard(out_dim). Local shape[in_dim] becomes N times
//                  larger and shape[out_dim] N times smaller (must divide).
//
// Numerics: all_gather and all_to_all move bytes, bit-exact (block-float tiles move whole when the
// cut is tile-aligned; otherwise through float32, requantised). Reductions run in float32 for every
// float dtype (int32/uint32: wrap-around integer arithmetic), partials travel in float32 unless
// CclOptions::partials_in_input_dtype, and the result is quantised once at the end. Each element's
// reduction order is fixed by the schedule (not by message arrival): results are bitwise identical
// on every member and from run to run. MEAN = SUM, then one division by N.
//
// Failure modes: every argument problem (bad dim or axis, a group of one device, a non-divisible
// reduce_scatter or all_to_all, a placement the op cannot take, num_links out of 1..16) is a
// meshnn::Error thrown before any communication, with the same message on every rank; the mesh
// stays usable. In checked mode (CclOptions::checked or MESHNN_CCL_CHECKED=1) the group first
// compares its members' arguments and every member throws the same error if they differ. A
// collective that stops making progress is reported by the watchdog (op, step, peer, bytes
// outstanding) and aborts the job.
#pragma once

#include <functional>
#include <optional>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn {

using ccl::Algorithm;
using ccl::CclOptions;
using ccl::HopSplit;

// out.local().shape()[dim] = N * in.local().shape()[dim]; block j along dim = member j's shard.
MeshTensor all_gather(const MeshTensor& input, int dim, std::optional<int> cluster_axis = {},
                      std::optional<Topology> topology = {}, int num_links = 1, const CclOptions& options = {});
// Member i keeps slice i (along dim) of the reduction over the group; out local shape[dim] =
// in local shape[dim] / N (must divide).
MeshTensor reduce_scatter(const MeshTensor& input, int dim, ReduceOp op = ReduceOp::SUM,
                          std::optional<int> cluster_axis = {}, std::optional<Topology> topology = {},
                          int num_links = 1, const CclOptions& options = {});
// The reduction over the group, same shape, identical on every member.
MeshTensor all_reduce(const MeshTensor& input, ReduceOp op = ReduceOp::SUM, std::optional<int> cluster_axis = {},
                      std::optional<Topology> topology = {}, int num_links = 1, const CclOptions& options = {});

// Member i keeps part i (along out_dim) of every member's shard, concatenated along in_dim in
// member order: the tensor goes from split along in_dim to split along out_dim without ever being
// whole anywhere. in_dim != out_dim; out local shape[out_dim] = in local shape[out_dim] / N (must
// divide).
MeshTensor all_to_all(const MeshTensor& input, int in_dim, int out_dim, std::optional<int> cluster_axis = {},
                      std::optional<Topology> topology = {}, int num_links = 1, const CclOptions& options = {});

// The same collectives into a caller-owned output (TT-NN's persistent output buffers): `output`
// must already have exactly the shape, dtype, layout and placements the returning form produces
// (else meshnn::Error); its storage is overwritten without reallocation.
void all_gather_into(const MeshTensor& input, MeshTensor& output, int dim, std::optional<int> cluster_axis = {},
                     std::optional<Topology> topology = {}, int num_links = 1, const CclOptions& options = {});
void reduce_scatter_into(const MeshTensor& input, MeshTensor& output, int dim, ReduceOp op = ReduceOp::SUM,
                         std::optional<int> cluster_axis = {}, std::optional<Topology> topology = {},
                         int num_links = 1, const CclOptions& options = {});
void all_reduce_into(const MeshTensor& input, MeshTensor& output, ReduceOp op = ReduceOp::SUM,
                     std::optional<int> cluster_axis = {}, std::optional<Topology> topology = {},
                     int num_links = 1, const CclOptions& options = {});
void all_to_all_into(const MeshTensor& input, MeshTensor& output, int in_dim, int out_dim,
                     std::optional<int> cluster_axis = {}, std::optional<Topology> topology = {}, int num_links = 1,
                     const CclOptions& options = {});

// all_gather_into that also hands every member's shard to on_shard(j, shard) as soon as it has
// arrived (j = the member's position in the group), while later shards still travel: the hook of
// the fused all_gather_matmul. Calls run on the calling thread one at a time, this member's own
// shard first, then in an order fixed by the schedule (ccl::all_gather_bytes_each); `shard` is only
// valid during its call. output is complete when the call returns.
void all_gather_into_each(const MeshTensor& input, MeshTensor& output, int dim,
                          const std::function<void(int member, const Tensor& shard)>& on_shard,
                          std::optional<int> cluster_axis = {}, std::optional<Topology> topology = {},
                          int num_links = 1, const CclOptions& options = {});

// reduce_scatter_into (SUM) of a float32 TILE input whose slices are produced while the reduction
// runs (the fused matmul_reduce_scatter): produce(j) returns this member's contribution to slice j
// (float32, TILE, the output's local shape); input gives the shape and placements only (its
// storage is not read). Calls run on the calling thread one at a time, each before its slice is
// first needed, in the ring's order of use. The bits are those of reduce_scatter_into on the
// concatenated slices. Slices must be whole tiles (else meshnn::Error before any message).
void reduce_scatter_into_each(const MeshTensor& input, MeshTensor& output, int dim,
                              const std::function<Tensor(int member)>& produce, std::optional<int> cluster_axis = {},
                              std::optional<Topology> topology = {}, int num_links = 1,
                              const CclOptions& options = {});

// The schedule a call would use (pure, same on every rank), e.g. to print in a benchmark.
ccl::Schedule planned_schedule(const MeshTensor& input, ccl::Collective collective, std::optional<int> cluster_axis = {},
                               std::optional<Topology> topology = {}, const CclOptions& options = {});

}  // namespace meshnn
