#include "meshnn/distributed/distribute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/tensor/concat.hpp"

namespace meshnn {
namespace {

constexpr int kComposeTag = 0x6d00;  // composers' point-to-point gather

void check_mapper(const MeshMapperConfig& mapper) {
  for (int axis = 0; axis < 2; ++axis)
    MESHNN_CHECK(!is_partial(mapper.placements[axis]),
                 "a mapper cannot place a host tensor as {} on mesh axis {}: Partial is the result of a "
                 "computation awaiting a reduction",
                 to_string(mapper.placements[axis]), axis);
}

// This rank's chunk `index` of `count` along dim (torch.chunk sizes), padded up to `chunk` when
// the mapper allows padding: the last chunks may be short or even empty.
Tensor take_chunk(const Tensor& t, int dim, int64_t chunk, int index, float pad_value) {
  const int64_t size = t.shape()[dim];
  const int64_t begin = std::min(size, chunk * index);
  const int64_t end = std::min(size, begin + chunk);
  return pad_to(slice(t, dim, begin, end), dim, chunk, pad_value);
}

// Every rank's shard, in device-id order, on every rank (root = nullopt: the runtime's own
// all_gather schedule) or on the root only (a one-step point-to-point gather). Shards have one
// shape on every rank, so every message size is known up front.
std::vector<Tensor> gather_shards(const MeshTensor& t, std::optional<int> root) {
  MeshDevice& mesh = t.mesh_device();
  const int n = mesh.num_devices();
  const int me = mesh.device_id();
  const Tensor& local = t.local();
  const size_t bytes = local.size_bytes();
  std::vector<Tensor> shards;
  if (!root) {
    std::vector<std::byte> all(bytes * static_cast<size_t>(n));
    if (n > 1) {
      ccl::MpiTransport transport(mesh.comm(), mesh.transport_kind(), [&mesh](int k) {
        return fmt::format("device {} {}", k, mesh.coordinate_of(k).to_string());
      });
      ccl::CallContext ctx{transport, ccl::tag_base_for(mesh.next_operation_id(), transport), mesh.topology(), 1, {},
                           "compose (all_gather)"};
      ccl::all_gather_bytes(ctx, local.data<std::byte>(), bytes, all.data());
    }
    for (int src = 0; src < n; ++src) {
      if (src == me) {
        shards.push_back(local);
        continue;
      }
      shards.emplace_back(local.shape(), local.dtype(), local.layout());
      std::memcpy(shards.back().data<std::byte>(), all.data() + bytes * static_cast<size_t>(src), bytes);
    }
    return shards;
  }
  const int count = checked_mpi_count(static_cast<int64_t>(bytes));
  std::vector<MPI_Request> requests;
  if (*root == me) {
    for (int src = 0; src < n; ++src) {
      shards.push_back(src == me ? local : Tensor(local.shape(), local.dtype(), local.layout()));
      if (src == me) continue;
      requests.emplace_back();
      MESHNN_MPI_CHECK(MPI_Irecv(shards.back().data<std::byte>(), count, MPI_BYTE, src, kComposeTag, mesh.comm(),
                                 &requests.back()));
    }
  } else {
    requests.emplace_back();
    MESHNN_MPI_CHECK(MPI_Isend(local.data<std::byte>(), count, MPI_BYTE, *root, kComposeTag, mesh.comm(), &requests.back()));
  }
  MESHNN_MPI_CHECK(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  return shards;
}

// A sharded mesh axis must be composed along the dim it shards; a Partial one must be reduced.
void check_axis_composition(const MeshTensor& t, int axis, int composed_dim, const char* composer) {
  const Placement& p = t.placement(axis);
  MESHNN_CHECK(!is_partial(p),
               "{}: the tensor is {} on mesh axis {}; reduce it (all_reduce or reduce_scatter) before composing",
               composer, to_string(p), axis);
  if (const auto* s = std::get_if<Shard>(&p))
    MESHNN_CHECK(s->dim == composed_dim || t.mesh_device().axis_size(axis) == 1,
                 "{}: the tensor is Shard({}) on mesh axis {} but the composer concatenates that axis on dim {}",
                 composer, s->dim, axis, composed_dim);
}

// Composed shards cover each padded dim exactly when the composer concatenates along it as the
// mapper split it; then the padding is at the end and is cut off.
Tensor drop_padding(const MeshTensor& t, Tensor composed) {
  for (int d = 0; d < t.shape().rank(); ++d) {
    const int64_t padded = t.shard_shape()[d] * shard_count(t.placements(), t.mesh_device().shape(), d);
    if (padded == t.shape()[d]) continue;
    if (composed.shape()[d] != padded) continue;  // copies of a replicated axis: validated earlier
    composed = slice(composed, d, 0, t.shape()[d]);
  }
  return composed;
}

Shape composed_shape(const MeshTensor& t, const MeshComposerConfig& c) {
  std::vector<int64_t> dims = t.shard_shape().to_vector();
  const MeshShape ms = t.mesh_device().shape();
  if (c.kind == MeshComposerConfig::Kind::CONCAT) {
    dims[static_cast<size_t>(c.dim)] *= ms.num_devices();
  } else {
    dims[static_cast<size_t>(c.row_dim)] *= ms.rows;
    dims[static_cast<size_t>(c.col_dim)] *= ms.cols;
  }
  return Shape(dims);
}

MeshComposerConfig normalized(const MeshComposerConfig& c, const Shape& shape) {
  MeshComposerConfig out = c;
  if (c.kind == MeshComposerConfig::Kind::CONCAT) out.dim = shape.normalize_dim(c.dim);
  if (c.kind == MeshComposerConfig::Kind::CONCAT_2D) {
    out.row_dim = shape.normalize_dim(c.row_dim);
    out.col_dim = shape.normalize_dim(c.col_dim);
    MESHNN_CHECK(out.row_dim != out.col_dim, "ConcatMesh2dToTensor needs two different dims, got {} and {}",
                 c.row_dim, c.col_dim);
  }
  return out;
}

}  // namespace

MeshMapperConfig ReplicateTensorToMesh() { return {}; }

MeshMapperConfig ShardTensorToMesh(int dim, bool allow_padding) {
  return {{Shard{dim}, Shard{dim}}, allow_padding, 0.0f};
}

MeshMapperConfig ShardTensor2dMesh(std::optional<int> row_dim, std::optional<int> col_dim, bool allow_padding) {
  MESHNN_CHECK(!(row_dim && col_dim && *row_dim == *col_dim),
               "ShardTensor2dMesh needs different dims for mesh rows and cols, got {} twice (use ShardTensorToMesh "
               "to split one dim over the whole mesh)",
               *row_dim);
  MeshMapperConfig m;
  if (row_dim) m.placements[0] = Shard{*row_dim};
  if (col_dim) m.placements[1] = Shard{*col_dim};
  m.allow_padding = allow_padding;
  return m;
}

MeshTensor distribute_tensor(const Tensor& host, const MeshMapperConfig& mapper, const MeshDevicePtr& mesh) {
  MESHNN_CHECK(mesh != nullptr && mesh->is_open(), "distribute_tensor needs an open MeshDevice");
  check_mapper(mapper);
  const Placements ps = normalize_placements(mapper.placements, host.shape().rank());
  const Shape shard = shard_shape_for(host.shape(), ps, mesh->shape(), mapper.allow_padding);

  // Dim by dim: a dim split by one axis takes that axis's chunk; a dim split by both takes the
  // row-major chunk (shard_index).
  Tensor local = host;
  for (int d = 0; d < host.shape().rank(); ++d) {
    if (shard_count(ps, mesh->shape(), d) == 1) continue;
    local = take_chunk(local, d, shard[d], shard_index(ps, mesh->shape(), mesh->coordinate(), d), mapper.pad_value);
  }
  return MeshTensor(mesh, host.shape(), ps, std::move(local));
}

MeshComposerConfig ConcatMeshToTensor(int dim) { return {MeshComposerConfig::Kind::CONCAT, dim, 0, 0}; }

MeshComposerConfig ConcatMesh2dToTensor(int row_dim, int col_dim) {
  MESHNN_CHECK(row_dim != col_dim, "ConcatMesh2dToTensor needs two different dims, got {} twice", row_dim);
  return {MeshComposerConfig::Kind::CONCAT_2D, 0, row_dim, col_dim};
}

MeshComposerConfig ListMeshToTensor() { return {MeshComposerConfig::Kind::LIST, 0, 0, 0}; }

Tensor aggregate_tensor(const MeshTensor& t, const MeshComposerConfig& composer, std::optional<int> root) {
  MESHNN_CHECK(composer.kind != MeshComposerConfig::Kind::LIST,
               "ListMeshToTensor gives one tensor per device: call aggregate_tensor_list");
  const MeshDevice& mesh = t.mesh_device();
  MESHNN_CHECK(!root || (*root >= 0 && *root < mesh.num_devices()), "root {} is not a device of the {} mesh",
               root.value_or(-1), mesh.shape().to_string());
  const MeshComposerConfig c = normalized(composer, t.shape());
  const char* name = c.kind == MeshComposerConfig::Kind::CONCAT ? "ConcatMeshToTensor" : "ConcatMesh2dToTensor";
  for (int axis = 0; axis < 2; ++axis)
    check_axis_composition(t, axis, c.kind == MeshComposerConfig::Kind::CONCAT ? c.dim : (axis == 0 ? c.row_dim : c.col_dim),
                           name);
  if (t.is_padded()) {
    const Shape out = composed_shape(t, c);
    for (int d = 0; d < t.shape().rank(); ++d) {
      const int64_t padded = t.shard_shape()[d] * shard_count(t.placements(), mesh.shape(), d);
      MESHNN_CHECK(padded == t.shape()[d] || out[d] == padded,
                   "{}: the tensor is padded on dim {} ({} -> {}); compose it along that dim to drop the padding",
                   name, d, t.shape()[d], padded);
    }
  }

  std::vector<Tensor> shards = gather_shards(t, root);
  if (shards.empty()) return Tensor();
  if (c.kind == MeshComposerConfig::Kind::CONCAT) return drop_padding(t, concat(shards, c.dim));
  const MeshShape ms = mesh.shape();
  std::vector<Tensor> rows;
  for (int r = 0; r < ms.rows; ++r)
    rows.push_back(concat(std::span<const Tensor>(shards).subspan(static_cast<size_t>(r * ms.cols), ms.cols), c.col_dim));
  return drop_padding(t, concat(rows, c.row_dim));
}

Tensor full_tensor(const MeshTensor& t, std::optional<int> root) {
  const MeshDevice& mesh = t.mesh_device();
  MESHNN_CHECK(!root || (*root >= 0 && *root < mesh.num_devices()), "root {} is not a device of the {} mesh",
               root.value_or(-1), mesh.shape().to_string());
  for (int axis = 0; axis < 2; ++axis)
    MESHNN_CHECK(!is_partial(t.placement(axis)),
                 "full_tensor: the tensor is {} on mesh axis {}; reduce it (all_reduce or reduce_scatter) first",
                 to_string(t.placement(axis)), axis);
  std::vector<Tensor> shards = gather_shards(t, root);
  if (shards.empty()) return Tensor();
  const MeshShape ms = mesh.shape();
  const auto* row_shard = std::get_if<Shard>(&t.placement(0));
  const auto* col_shard = std::get_if<Shard>(&t.placement(1));
  if (row_shard && col_shard && row_shard->dim == col_shard->dim)  // one dim split row-major
    return drop_padding(t, concat(shards, row_shard->dim));
  // Each mesh row: its shards joined on the column axis's dim (or its first device if replicated);
  // then the rows joined on the row axis's dim (or the first row).
  std::vector<Tensor> rows;
  for (int r = 0; r < ms.rows; ++r) {
    const auto row = std::span<const Tensor>(shards).subspan(static_cast<size_t>(r * ms.cols), ms.cols);
    rows.push_back(col_shard ? concat(row, col_shard->dim) : row.front());
  }
  return drop_padding(t, row_shard ? concat(rows, row_shard->dim) : rows.front());
}

std::vector<Tensor> aggregate_tensor_list(const MeshTensor& t, std::optional<int> root) {
  const MeshDevice& mesh = t.mesh_device();
  MESHNN_CHECK(!root || (*root >= 0 && *root < mesh.num_devices()), "root {} is not a device of the {} mesh",
               root.value_or(-1), mesh.shape().to_string());
  return gather_shards(t, root);
}

}  // namespace meshnn
