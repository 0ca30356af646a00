#include "meshnn/distributed/collective_matmul.hpp"

#include <vector>

#include "meshnn/ccl/specs.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/distributed/matmul.hpp"
#include "meshnn/ops/eltwise.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/tensor/tile_layout.hpp"

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

// The product's dim c (of a rank-rc product) as A's dim, checked to be A's row dim or a batch dim
// that b broadcasts: each block of it is a block of A's rows times the whole of b.
int row_block_dim_of_a(const Shape& a, const Shape& b, int c, int rc, std::string_view op, std::string_view what) {
  const int ra = a.rank(), rb = b.rank(), d = c - (rc - ra), b_dim = c - (rc - rb);
  MESHNN_CHECK(d == ra - 2 || (d >= 0 && d < ra - 2 && (b_dim < 0 || b[b_dim] == 1)),
               "{}: {} dim {} must be the row dim or a batch dim that B {} broadcasts (A {})", op, what, c, b, a);
  return d;
}

// Whether a block of `block_rows` rows multiplies on the kernel path the whole would take.
bool same_kernel_path(const Tensor& a, const Tensor& w, const Shape& block, const Shape& whole) {
  return std::string_view(matmul_kernel_path(a.dtype(), w.dtype(), rows_per_weight(block, w.shape()))) ==
         matmul_kernel_path(a.dtype(), w.dtype(), rows_per_weight(whole, w.shape()));
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
  const int ra = a.shape().rank();
  const bool contraction = d == ra - 1;
  if (!contraction) row_block_dim_of_a(a.shape(), b.shape(), d, ra, kOp, "the gathered");
  const ccl::Group g = ccl::resolve_group(a.mesh_device(), cluster_axis, kOp);
  const ccl::OutputSpec gathered_spec = ccl::gather_spec(a, g, d);
  const MatmulPlan plan = plan_matmul(gathered_spec.global, a.dtype(), a.layout(), gathered_spec.placements, b.shape(),
                                      b.dtype(), b.layout(), b.placements(), a.mesh()->shape());
  MESHNN_CHECK(plan.a.steps.empty() && plan.b.steps.empty() && !plan.summa,
               "{}: once gathered, A {} {} and B {} {} do not multiply where they are (distributed/matmul.hpp's "
               "rules); B on the gathered axis must be Replicate or Shard(N)",
               kOp, gathered_spec.global, to_string(gathered_spec.placements), b.shape(), to_string(b.placements()));

  MatmulOptions local;
  local.output_dtype = options.output_dtype.value_or(a.dtype());
  MeshTensor gathered(a.mesh(), gathered_spec.global, gathered_spec.placements,
                      Tensor(gathered_spec.local, a.dtype(), a.layout()));
  const Tensor& w = b.local();
  // Row blocks: fused only when every block takes the kernel path the whole would (the same
  // bits). K chunks: when each chunk's rows of b start on a tile and b is one matrix.
  const int64_t chunk_k = a.local().shape()[-1];
  const bool fusable = contraction ? chunk_k % kTileHeight == 0 && w.volume() == w.shape()[-2] * w.shape()[-1]
                                   : same_kernel_path(a.local(), w, a.local().shape(), gathered_spec.local);
  if (!options.fused || !fusable) {
    all_gather_into(a, gathered, d, cluster_axis, options.topology, options.num_links, options.ccl);
    MeshTensor product(a.mesh(), plan.product_shape, plan.product, matmul(gathered.local(), w, false, false, local));
    return {std::move(gathered), std::move(product)};
  }
  MatmulOptions block_options = local;
  block_options.output_dtype = DataType::FLOAT32;
  if (contraction) {
    // Each chunk of K times its own rows of b, read in place (each weight byte once, as the
    // unfused product reads it), summed in float32 in the order the chunks complete.
    Tensor sum;
    bool first = true;
    all_gather_into_each(
        a, gathered, d,
        [&](int member, const Tensor& chunk) {
          MatmulOptions rows = block_options;
          rows.b_row_begin = member * chunk_k;
          Tensor part = matmul(chunk, w, false, false, rows);
          if (first) {
            sum = std::move(part);
            first = false;
            return;
          }
          add_into(sum, part, sum);
        },
        cluster_axis, options.topology, options.num_links, options.ccl);
    if (sum.dtype() != *local.output_dtype) sum = sum.typecast(*local.output_dtype);
    return {std::move(gathered), MeshTensor(a.mesh(), plan.product_shape, plan.product, std::move(sum))};
  }
  // Each block's rows of the product as soon as the block is in, in float32 (a block boundary may
  // cut tiles: concat repacks float32 exactly), quantised once at the end as the whole would be.
  std::vector<Tensor> blocks(static_cast<size_t>(g.size));
  all_gather_into_each(
      a, gathered, d,
      [&](int member, const Tensor& shard) { blocks[static_cast<size_t>(member)] = matmul(shard, w, false, false, block_options); },
      cluster_axis, options.topology, options.num_links, options.ccl);
  Tensor whole = concat(blocks, d + (plan.product_shape.rank() - ra));
  if (whole.dtype() != *local.output_dtype) whole = whole.typecast(*local.output_dtype);
  return {std::move(gathered), MeshTensor(a.mesh(), plan.product_shape, plan.product, std::move(whole))};
}

MeshTensor matmul_reduce_scatter(const MeshTensor& a, const MeshTensor& b, int dim, std::optional<int> cluster_axis,
                                 const CollectiveMatmulOptions& options) {
  constexpr std::string_view kOp = "matmul_reduce_scatter";
  MESHNN_CHECK(a.mesh() == b.mesh(), "{}: A and B are on different meshes", kOp);
  MESHNN_CHECK(a.shape().rank() >= 2 && b.shape().rank() >= 2, "{}: needs rank >= 2 operands, got A {} and B {}", kOp,
               a.shape(), b.shape());
  ccl::check_common(a, options.num_links, kOp);
  const MatmulPlan plan = plan_matmul(a.shape(), a.dtype(), a.layout(), a.placements(), b.shape(), b.dtype(),
                                      b.layout(), b.placements(), a.mesh()->shape());
  const ccl::Group g = ccl::resolve_group(a.mesh_device(), cluster_axis, kOp);
  bool partial_on_group = plan.a.steps.empty() && plan.b.steps.empty() && !plan.summa;
  for (int axis : g.axes)
    if (ccl::mesh_axis_size(a.mesh()->shape(), axis) > 1)
      partial_on_group = partial_on_group && is_partial(plan.product[axis]);
  MESHNN_CHECK(partial_on_group,
               "{}: A {} {} and B {} {} must multiply where they are into partial sums along the scattered axes "
               "(A and B split on the contraction dim, or A Partial and B Replicate)",
               kOp, a.shape(), to_string(a.placements()), b.shape(), to_string(b.placements()));
  const int rc = plan.product_shape.rank();
  const int c = ccl::normalize(plan.product_shape, dim, kOp);
  const int d = row_block_dim_of_a(a.shape(), b.shape(), c, rc, kOp, "the scattered");

  const DataType out_dtype = options.output_dtype.value_or(a.dtype());
  MatmulOptions float32_product;
  float32_product.output_dtype = DataType::FLOAT32;
  const Tensor& x = a.local();
  const Tensor& w = b.local();
  const Shape local_product = shard_shape_for(plan.product_shape, plan.product, a.mesh()->shape(), false);
  MeshTensor scattered;
  // Fused when the product's slices are whole tiles (the row dim cut at multiples of 32) and each
  // block of A's rows multiplies on the kernel path of the whole.
  const int64_t rows = x.shape()[d];
  Shape block_shape = x.shape();
  block_shape[d] = rows / g.size;
  const bool fusable = rows % g.size == 0 && (d != x.shape().rank() - 2 || block_shape[d] % kTileHeight == 0) &&
                       same_kernel_path(x, w, block_shape, x.shape());
  if (!options.fused || !fusable) {
    const MeshTensor product(a.mesh(), plan.product_shape, plan.product, matmul(x, w, false, false, float32_product));
    scattered = reduce_scatter(product, c, ReduceOp::SUM, cluster_axis, options.topology, options.num_links, options.ccl);
  } else {
    // The input's shape and placements (its storage is never read: slices are produced on demand).
    const MeshTensor spec(a.mesh(), plan.product_shape, plan.product,
                          Tensor::uninitialized(local_product, DataType::FLOAT32, Layout::TILE));
    const ccl::OutputSpec out_spec = ccl::reduce_scatter_spec(spec, g, c, ReduceOp::SUM);
    scattered = MeshTensor(a.mesh(), out_spec.global, out_spec.placements,
                           Tensor::uninitialized(out_spec.local, DataType::FLOAT32, Layout::TILE));
    const int64_t block = rows / g.size;
    reduce_scatter_into_each(
        spec, scattered, c,
        [&](int j) { return matmul(slice(x, d, j * block, (j + 1) * block), w, false, false, float32_product); },
        cluster_axis, options.topology, options.num_links, options.ccl);
  }
  if (scattered.dtype() == out_dtype) return scattered;
  return MeshTensor(a.mesh(), scattered.shape(), scattered.placements(), scattered.local().typecast(out_dtype));
}

}  // namespace meshnn::distributed
