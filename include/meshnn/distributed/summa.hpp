// SUMMA (van de Geijn and Watts' Scalable Universal Matrix Multiplication Algorithm): C = A @ B on
// an R x C mesh with every operand split over both axes, never gathered whole.
//
//   A [..., M, K]  {Shard(M) on axis 0, Shard(K) on axis 1}
//   B [K, N]       {Shard(K) on axis 0, Shard(N) on axis 1}
//   C [..., M, N]  {Shard(M) on axis 0, Shard(N) on axis 1}
//
// K is cut into panels of a common width that divides both splits of K (A's over the C mesh
// columns, B's over the R mesh rows), so a panel never straddles two owners. For each panel in
// order, the mesh column owning A's panel broadcasts it along every mesh row (cluster_axis 1), the
// mesh row owning B's panel broadcasts it along every mesh column (cluster_axis 0), and every
// device adds A_panel @ B_panel into its float32 C block. All panels' broadcasts and products run
// as one ccl Plan: a few panels travel (pipelined chains, ccl::add_broadcast) while the current one
// is multiplied, in buffers reused once their product and forwarding are done, so a device never
// holds more than `lookahead + 1` panels of each operand.
//
// Numerics: the products accumulate in float32 in panel order (the same on every run and every
// rank), quantised once at the end to the output dtype. Degenerate meshes work too: on 1 x N only A
// panels travel, on N x 1 only B panels, on 1 x 1 nothing.
//
// Errors: operands off the placements above (on axes of more than one device), shapes that do not
// split evenly, a panel width that does not divide both splits, dtypes or layouts the local matmul
// does not take: the same meshnn::Error on every rank before any message.
#pragma once

#include <optional>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"

namespace meshnn::distributed {

struct SummaOptions {
  std::optional<DataType> output_dtype;  // default: A's dtype
  // K elements per panel (0: summa_panel_width's choice); must divide K/C and K/R.
  int64_t panel_width = 0;
  int lookahead = 2;  // panels received ahead of the one being multiplied (>= 1)
  std::optional<Topology> topology;  // default: the mesh's
  int num_links = 1;
  CclOptions ccl;  // schedule and chunk size of the panel broadcasts
};

// The placements SUMMA takes for A (rank a_rank), B (rank 2) and gives C on a mesh of `mesh`
// shape (Replicate on an axis of one device).
Placements summa_a_placements(int a_rank, MeshShape mesh);
Placements summa_b_placements(MeshShape mesh);
Placements summa_c_placements(int c_rank, MeshShape mesh);

// The panel width for a contraction of k on `mesh`: `requested` if it divides both splits of k
// (else meshnn::Error), else the largest common block g = gcd(k/cols, k/rows), cut to the largest
// multiple of 32 dividing it that is at most 512 when g is a multiple of 32 above 512 (whole tiles,
// and panels enough to pipeline). Pure.
int64_t summa_panel_width(int64_t k, MeshShape mesh, int64_t requested = 0);

// Throws the error summa would for operands of these shapes, dtypes, layouts and placements (pure,
// no data: the planner's dry run and summa's own check).
void check_summa(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& a_placements, const Shape& b,
                 DataType b_dtype, Layout b_layout, const Placements& b_placements, MeshShape mesh,
                 const SummaOptions& options = {});

// C = A @ B as above. Collective over the operands' mesh.
MeshTensor summa(const MeshTensor& a, const MeshTensor& b, const SummaOptions& options = {});

}  // namespace meshnn::distributed
