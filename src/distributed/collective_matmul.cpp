#include "meshnn/distributed/collective_matmul.hpp"

#include <vector>

#include "meshnn/ccl/specs.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/distributed/matmul.hpp"
#include "meshnn/tensor/concat.hpp"

namespace meshnn::distributed {
namespace {

// Rows that share one weight matrix in a local product of a [..., M, K] with b (the kernel path's
// input): M times the batches of a when b is a single matrix, else M.
int64_t rows_per_weight(const Shape& a, const Shape& b) {
  int64_t rows = a[-2];
  if (b.volume() == b[-2] * b[-1])
    for (int d = 0; d + 2 < a.rank(); ++d) rows *= a[d];
  return rows;
}

}  // namespace

AllGatherMatmulResult all_gather_matmul(const MeshTensor& a, const MeshTensor& b, int dim,
                                        std::optional<int> cluster_axis, const CollectiveMatmulOptions& options) {
  constexpr std::string_view kOp = "all_gather_matmul";
  MESHNN_CHECK(a.mesh() == b.mesh(), "{}: A and B are on different meshes", kOp);
  MESHNN_CHECK(a.shape().rank() >= 2 && b.shape().rank() >= 2, "{}: needs rank >= 2 operands, got A {} and B {}", kOp,
               a.shape(), b.shape());
  ccl::check_common(a, options.num_links, kOp);
  const int d = ccl::normalize(a.shape(), dim, kOp);
  const int ra = a.shape().rank(), rb = b.shape().rank();
  // The row dim, or a batch dim b does not split: each gathered block then multiplies b as a whole.
  const int b_dim = d - (ra - rb);  // b's dim aligned with d (negative: b has none)
  MESHNN_CHECK(d == ra - 2 || (d < ra - 2 && (b_dim < 0 || b.shape()[b_dim] == 1)),
               "{}: dim {} of A {} is {}; the gathered dim must be A's row dim ({}) or a batch dim that B {} "
               "broadcasts",
               kOp, dim, a.shape(), d == ra - 1 ? "the contraction dim" : "a batch dim B also has", ra - 2, b.shape());
  const ccl::Group g = ccl::resolve_group(a.mesh_device(), cluster_axis, kOp);
  const ccl::OutputSpec gathered_spec = ccl::gather_spec(a, g, d);
  const MatmulPlan plan = plan_matmul(gathered_spec.global, a.dtype(), a.layout(), gathered_spec.placements, b.shape(),
                                      b.dtype(), b.layout(), b.placements(), a.mesh()->shape());
  MESHNN_CHECK(plan.a.steps.empty() && plan.b.steps.empty(),
               "{}: once gathered, A {} {} and B {} {} do not multiply where they are (distributed/matmul.hpp's "
               "rules); B on the gathered axis must be Replicate or Shard(N)",
               kOp, gathered_spec.global, to_string(gathered_spec.placements), b.shape(), to_string(b.placements()));

  MatmulOptions local;
  local.output_dtype = options.output_dtype.value_or(a.dtype());
  MeshTensor gathered(a.mesh(), gathered_spec.global, gathered_spec.placements,
                      Tensor(gathered_spec.local, a.dtype(), a.layout()));
  const Tensor& w = b.local();
  // Fused only when every block takes the kernel path the whole would (the same bits).
  const bool same_path =
      std::string_view(matmul_kernel_path(a.dtype(), w.dtype(), rows_per_weight(a.local().shape(), w.shape()))) ==
      matmul_kernel_path(a.dtype(), w.dtype(), rows_per_weight(gathered_spec.local, w.shape()));
  if (!options.fused || !same_path) {
    all_gather_into(a, gathered, d, cluster_axis, options.topology, options.num_links, options.ccl);
    MeshTensor product(a.mesh(), plan.product_shape, plan.product, matmul(gathered.local(), w, false, false, local));
    return {std::move(gathered), std::move(product)};
  }
  // Each block's rows of the product as soon as the block is in, in float32 (a block boundary may
  // cut tiles: concat repacks float32 exactly), quantised once at the end as the whole would be.
  std::vector<Tensor> blocks(static_cast<size_t>(g.size));
  MatmulOptions block_options = local;
  block_options.output_dtype = DataType::FLOAT32;
  all_gather_into_each(
      a, gathered, d,
      [&](int member, const Tensor& shard) { blocks[static_cast<size_t>(member)] = matmul(shard, w, false, false, block_options); },
      cluster_axis, options.topology, options.num_links, options.ccl);
  Tensor whole = concat(blocks, d + (plan.product_shape.rank() - ra));
  if (whole.dtype() != *local.output_dtype) whole = whole.typecast(*local.output_dtype);
  return {std::move(gathered), MeshTensor(a.mesh(), plan.product_shape, plan.product, std::move(whole))};
}

}  // namespace meshnn::distributed
