// The mesh-tensor collectives: validate (no communication), compute the output spec (pure), bring
// the local shard into the buffer form a schedule wants, run it, and convert back.
#include "meshnn/ccl/ccl.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include "meshnn/ccl/plan.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/block_float.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/tensor/storage_codec.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

using ccl::Collective;

int mesh_axis_size(MeshShape s, int axis) { return axis == 0 ? s.rows : s.cols; }

// One or both mesh axes (no heap: resolved on every call).
struct AxisList {
  int v[2] = {0, 1};
  int n = 0;
  const int* begin() const { return v; }
  const int* end() const { return v + n; }
  size_t size() const { return static_cast<size_t>(n); }
  int operator[](size_t i) const { return v[i]; }
};

// The devices a collective runs over, and which mesh axes its placement change applies to.
struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 1, position = 0;
  AxisList axes;  // mesh axes whose placement the op rewrites
  std::optional<int> cluster_axis;
};

// Device id of group position k (for messages only).
int member_id(const MeshDevice& mesh, const Group& g, int k) {
  if (!g.cluster_axis) return k;
  const MeshCoordinate me = mesh.coordinate();
  return *g.cluster_axis == 0 ? mesh.device_id_of({k, me.col}) : mesh.device_id_of({me.row, k});
}

Group resolve_group(const MeshDevice& mesh, std::optional<int> cluster_axis, std::string_view op) {
  Group g;
  g.cluster_axis = cluster_axis;
  const MeshShape shape = mesh.shape();
  if (cluster_axis) {
    const int a = *cluster_axis;
    MESHNN_CHECK(a == 0 || a == 1, "{}: cluster_axis must be 0 or 1 (or none for the whole mesh), got {}", op, a);
    MESHNN_CHECK(mesh_axis_size(shape, a) > 1,
                 "{}: cluster_axis {} of a {} mesh groups a single device; use cluster_axis {} or none", op, a,
                 shape.to_string(), 1 - a);
    g.comm = mesh.axis_comm(a);
    g.size = mesh.axis_size(a);
    g.position = mesh.axis_position(a);
    g.axes.v[0] = a;
    g.axes.n = 1;
  } else {
    g.comm = mesh.comm();
    g.size = mesh.num_devices();
    g.position = mesh.device_id();
    g.axes.n = 2;
  }
  MESHNN_CHECK(g.size > 1, "{} needs more than one device, got {} (a {} mesh)", op, g.size, shape.to_string());
  return g;
}

int normalize(const Shape& shape, int dim, std::string_view op) {
  MESHNN_CHECK(dim >= -shape.rank() && dim < shape.rank(), "{}: dim {} is out of range for a rank-{} tensor of shape {}",
               op, dim, shape.rank(), shape);
  return dim < 0 ? dim + shape.rank() : dim;
}

bool nontrivial(const MeshTensor& t, int axis) { return mesh_axis_size(t.mesh_device().shape(), axis) > 1; }

struct OutputSpec {
  Shape global, local;
  Placements placements;
};

// A dim sharded on both axes means a row-major split over all devices: only consistent if axis 0
// is the outer split, so adding axis 0 under an existing axis-1 split of the same dim is not.
void check_nested_shard(const MeshTensor& t, const Group& g, int d, std::string_view op, std::string_view what) {
  if (g.axes.size() != 1) return;
  const int a = g.axes[0], other = 1 - a;
  const auto* s = std::get_if<Shard>(&t.placement(other));
  MESHNN_CHECK(!(a == 0 && s && s->dim == d && nontrivial(t, other)),
               "{}: {} dim {} on cluster_axis 0 while cluster_axis 1 shards the same dim ({}) leaves a non-row-major "
               "split; use cluster_axis 1 or none",
               op, what, d, to_string(t.placements()));
}

OutputSpec gather_spec(const MeshTensor& t, const Group& g, int d) {
  constexpr std::string_view op = "all_gather";
  bool any_shard = false, any_replicate = false;
  for (int a : g.axes) {
    if (!nontrivial(t, a)) continue;
    const Placement& pl = t.placement(a);
    if (const auto* s = std::get_if<Shard>(&pl)) {
      MESHNN_CHECK(s->dim == d, "all_gather: dim {} but the tensor is sharded on dim {} along mesh axis {} ({})", d,
                   s->dim, a, to_string(t.placements()));
      any_shard = true;
    } else if (is_partial(pl)) {
      throw Error(fmt::format("all_gather: the tensor is {} along mesh axis {}: reduce it first (reduce_scatter or "
                              "all_reduce)", to_string(pl), a));
    } else {
      any_replicate = true;
    }
  }
  MESHNN_CHECK(!(any_shard && any_replicate), "all_gather over the whole mesh needs the same placement on both axes, got {}",
               to_string(t.placements()));
  if (any_shard) check_nested_shard(t, g, d, op, "gathering");
  MESHNN_CHECK(!t.is_padded(), "all_gather: the tensor's shards carry padding (shape {}, shard {}); not supported",
               t.shape(), t.shard_shape());
  OutputSpec s{t.shape(), t.local().shape(), t.placements()};
  s.local[d] = s.local[d] * g.size;
  if (!any_shard) s.global[d] = s.global[d] * g.size;  // replicated input: N copies side by side
  for (int a : g.axes) s.placements[a] = Replicate{};
  return s;
}

void check_reducible(const MeshTensor& t, const Group& g, ReduceOp op, std::string_view name) {
  for (int a : g.axes) {
    if (!nontrivial(t, a)) continue;
    const Placement& pl = t.placement(a);
    if (const auto* p = std::get_if<Partial>(&pl)) {
      MESHNN_CHECK(p->op == op, "{}: the tensor is {} along mesh axis {} but the reduction is {}", name, to_string(pl), a,
                   to_string(op));
    } else {
      MESHNN_CHECK(is_replicate(pl), "{}: the tensor is {} along mesh axis {}: reducing different shards is "
                   "meaningless (all_gather it instead)", name, to_string(pl), a);
    }
  }
}

OutputSpec reduce_scatter_spec(const MeshTensor& t, const Group& g, int d, ReduceOp op) {
  check_reducible(t, g, op, "reduce_scatter");
  check_nested_shard(t, g, d, "reduce_scatter", "scattering");
  const int64_t size = t.local().shape()[d];
  MESHNN_CHECK(size % g.size == 0, "reduce_scatter: dim {} of size {} (shard shape {}) does not divide over {} devices",
               d, size, t.shard_shape(), g.size);
  OutputSpec s{t.shape(), t.local().shape(), t.placements()};
  s.local[d] = size / g.size;
  for (int a : g.axes) s.placements[a] = Shard{d};
  return s;
}

OutputSpec all_reduce_spec(const MeshTensor& t, const Group& g, ReduceOp op) {
  check_reducible(t, g, op, "all_reduce");
  OutputSpec s{t.shape(), t.local().shape(), t.placements()};
  for (int a : g.axes) s.placements[a] = Replicate{};
  return s;
}

void check_common(const MeshTensor& t, int num_links, std::string_view op) {
  MESHNN_CHECK(t.mesh() != nullptr && t.mesh_device().is_open(), "{}: the tensor's mesh is not open", op);
  MESHNN_CHECK(num_links >= 1 && num_links <= ccl::kMaxLinks, "{}: num_links must be 1..{}, got {}", op, ccl::kMaxLinks,
               num_links);
}

void check_output(const MeshTensor& out, const OutputSpec& s, const MeshTensor& in, std::string_view op) {
  MESHNN_CHECK(out.mesh() == in.mesh() && out.shape() == s.global && out.local().shape() == s.local &&
                   out.placements() == s.placements && out.dtype() == in.dtype() && out.layout() == in.layout(),
               "{}: output tensor {} {} {} {} does not match the expected {} {} {} {}", op, out.shape(),
               to_string(out.placements()), to_string(out.dtype()), to_string(out.layout()), s.global,
               to_string(s.placements), to_string(in.dtype()), to_string(in.layout()));
}

// ---- storage views ----

// How the n parts of `shape` along d sit in storage, in storage elements (TILE: padded, 1024 per
// tile): `outer` repetitions of [part 0 run][part 1 run]...; nullopt when a part boundary cuts tiles.
struct Runs {
  int64_t outer, run;
};
std::optional<Runs> slice_runs(const Shape& shape, Layout layout, int d, int n) {
  const int r = shape.rank();
  if (layout == Layout::ROW_MAJOR) return Runs{shape.outer_volume(d), shape[d] / n * shape.inner_volume(d)};
  if (r == 1) {
    const int64_t part = shape[0] / n;
    if (part % kTileWidth) return std::nullopt;
    return Runs{1, part * kTileHeight};
  }
  const int64_t hp = round_up_to_tile(shape[r - 2]), wp = round_up_to_tile(shape[r - 1]);
  int64_t batch = 1;
  for (int k = 0; k < r - 2; ++k) batch *= shape[k];
  if (d < r - 2) {
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < d; ++k) outer *= shape[k];
    for (int k = d + 1; k < r - 2; ++k) inner *= shape[k];
    return Runs{outer, shape[d] / n * inner * hp * wp};
  }
  const int64_t part = shape[d] / n;
  if (part % kTileWidth) return std::nullopt;
  if (d == r - 2) return Runs{batch, part * wp};
  return Runs{batch * (hp / kTileHeight), part * kTileHeight};
}

size_t storage_bytes_of(int64_t elements, DataType dtype) {
  if (is_block_float(dtype)) return static_cast<size_t>(elements / kTileVolume) * tile_bytes(dtype);
  return static_cast<size_t>(elements) * element_bytes(dtype);
}

ccl::ElementType compute_type(DataType dtype) {
  return dtype == DataType::INT32 ? ccl::ElementType::I32
         : dtype == DataType::UINT32 ? ccl::ElementType::U32
                                     : ccl::ElementType::F32;
}
// Storage already in the compute type (no conversion pass).
bool native(DataType dtype) { return dtype == DataType::FLOAT32 || is_integer(dtype); }

int64_t storage_elements(const Tensor& t) {
  if (t.layout() == Layout::TILE) return t.num_tiles() * kTileVolume;
  return t.volume();
}

// Storage -> compute values (same element order; block floats in face order). Integers are
// their own compute type.
void storage_to_compute(const Tensor& t, void* out) {
  const int64_t n = storage_elements(t);
  if (is_integer(t.dtype())) std::memcpy(out, t.data<std::byte>(), static_cast<size_t>(n) * 4);
  else decode_storage(t.data<std::byte>(), t.dtype(), n, static_cast<float*>(out));
}
// Compute values -> storage, quantising once.
void compute_to_storage(const void* values, Tensor& t) {
  const int64_t n = storage_elements(t);
  if (is_integer(t.dtype())) std::memcpy(t.data<std::byte>(), values, static_cast<size_t>(n) * 4);
  else encode_storage(static_cast<const float*>(values), t.dtype(), n, t.data<std::byte>());
}

// ---- checked mode ----

bool checked_mode(const CclOptions& o) {
  // The environment is read once per process (getenv scans the whole, launcher-sized, environment).
  static const bool from_env = [] {
    const char* v = std::getenv("MESHNN_CCL_CHECKED");
    return v && std::string_view(v) == "1";
  }();
  return o.checked || from_env;
}

// Every member learns every member's argument description; all throw the same error on mismatch.
void check_arguments_agree(ccl::Transport& transport, int tag_base, const std::string& what, const std::string& op) {
  constexpr size_t kBytes = 512;
  std::vector<char> mine(kBytes, 0), all(kBytes * transport.size());
  std::memcpy(mine.data(), what.data(), std::min(what.size(), kBytes - 1));
  CclOptions o;
  o.algorithm = Algorithm::Direct;
  ccl::CallContext ctx{transport, tag_base, Topology::Ring, 1, o, op + " (checked-mode argument exchange)"};
  ccl::all_gather_bytes(ctx, mine.data(), kBytes, all.data());
  std::map<std::string, std::vector<int>> groups;
  for (int k = 0; k < transport.size(); ++k) groups[std::string(all.data() + k * kBytes)].push_back(k);
  if (groups.size() == 1) return;
  std::string message = fmt::format("{}: arguments differ across the group (checked mode):", op);
  for (const auto& [desc, members] : groups) message += fmt::format(" members {} have [{}];", fmt::join(members, ","), desc);
  throw Error(message);
}

std::string describe_args(const MeshTensor& t, std::string_view op, int dim, ReduceOp rop, const Group& g, Topology topo,
                          int links, const CclOptions& o) {
  return fmt::format("{} shape={} shard={} dtype={} layout={} placements={} dim={} op={} axis={} topology={} links={} "
                     "algorithm={} chunk={} wire={}",
                     op, t.shape(), t.shard_shape(), to_string(t.dtype()), to_string(t.layout()),
                     to_string(t.placements()), dim, to_string(rop), g.cluster_axis ? std::to_string(*g.cluster_axis) : "none",
                     to_string(topo), links, ccl::to_string(o.algorithm), o.chunk_bytes, o.partials_in_input_dtype);
}

// Shared by the three: transport + tags + checked mode, then `body`.
template <class Body>
void run_collective(const MeshTensor& in, const Group& g, std::string_view op, int dim, ReduceOp rop,
                    std::optional<Topology> topology, int num_links, const CclOptions& options, Body&& body) {
  MeshDevice& mesh = in.mesh_device();
  const Topology topo = topology.value_or(mesh.topology());
  // Names are formatted only if the watchdog needs one.
  ccl::MpiTransport transport(g.comm, [&g, &mesh](int k) {
    const int id = member_id(mesh, g, k);
    return fmt::format("device {} {}", id, mesh.coordinate_of(id).to_string());
  });
  // The argument exchange is an operation of its own (its own tags), then the collective.
  if (checked_mode(options))
    check_arguments_agree(transport, ccl::tag_base_for(mesh.next_operation_id(), transport),
                          describe_args(in, op, dim, rop, g, topo, num_links, options), std::string(op));
  const int tag_base = ccl::tag_base_for(mesh.next_operation_id(), transport);
  ccl::CallContext ctx{transport, tag_base, topo, num_links, options, std::string(op)};
  body(ctx);
}

ccl::Reduction reduction_for(DataType dtype, ReduceOp op, int n, const CclOptions& o) {
  ccl::Reduction r;
  r.op = op;
  r.type = compute_type(dtype);
  r.bf16_wire = o.partials_in_input_dtype && r.type == ccl::ElementType::F32 && dtype != DataType::FLOAT32;
  r.group_size = n;
  return r;
}

Tensor tensor_from_bytes(const Shape& shape, DataType dtype, Layout layout, const std::byte* bytes) {
  Tensor t(shape, dtype, layout);
  std::memcpy(t.data<std::byte>(), bytes, t.size_bytes());
  return t;
}

}  // namespace

// ---------------- all_gather ----------------

void all_gather_into(const MeshTensor& input, MeshTensor& output, int dim, std::optional<int> cluster_axis,
                     std::optional<Topology> topology, int num_links, const CclOptions& options) {
  check_common(input, num_links, "all_gather");
  const int d = normalize(input.shape(), dim, "all_gather");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "all_gather");
  const OutputSpec spec = gather_spec(input, g, d);
  check_output(output, spec, input, "all_gather");
  const Tensor& in = input.local();
  Tensor& out = output.local();
  run_collective(input, g, "all_gather", d, ReduceOp::SUM, topology, num_links, options, [&](ccl::CallContext& ctx) {
    const int n = g.size;
    const auto runs = slice_runs(spec.local, in.layout(), d, n);
    if (runs && runs->outer == 1) {
      // Shards are consecutive in the output's storage: receive straight into it.
      ccl::all_gather_bytes(ctx, in.data<std::byte>(), in.size_bytes(), out.data<std::byte>());
      return;
    }
    ccl::ScratchScope scratch;
    std::byte* staging = scratch.acquire(in.size_bytes() * n);
    ccl::all_gather_bytes(ctx, in.data<std::byte>(), in.size_bytes(), staging);
    if (runs) {
      // Interleave: for each outer index, one run from every member (whole tiles: bit-exact).
      const size_t run = storage_bytes_of(runs->run, in.dtype());
      std::byte* o = out.data<std::byte>();
      for (int64_t k = 0; k < runs->outer; ++k)
        for (int j = 0; j < n; ++j) copy_bytes(o + (k * n + j) * run, staging + j * in.size_bytes() + k * run, run);
      return;
    }
    // A part boundary cuts tiles: let concat() repack (block floats are requantised there).
    std::vector<Tensor> parts;
    for (int j = 0; j < n; ++j)
      parts.push_back(tensor_from_bytes(in.shape(), in.dtype(), in.layout(), staging + j * in.size_bytes()));
    out = concat(parts, d);
  });
}

MeshTensor all_gather(const MeshTensor& input, int dim, std::optional<int> cluster_axis, std::optional<Topology> topology,
                      int num_links, const CclOptions& options) {
  check_common(input, num_links, "all_gather");
  const int d = normalize(input.shape(), dim, "all_gather");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "all_gather");
  const OutputSpec spec = gather_spec(input, g, d);
  MeshTensor output(input.mesh(), spec.global, spec.placements, Tensor(spec.local, input.dtype(), input.layout()));
  all_gather_into(input, output, dim, cluster_axis, topology, num_links, options);
  return output;
}

// ---------------- reduce_scatter ----------------

void reduce_scatter_into(const MeshTensor& input, MeshTensor& output, int dim, ReduceOp op,
                         std::optional<int> cluster_axis, std::optional<Topology> topology, int num_links,
                         const CclOptions& options) {
  check_common(input, num_links, "reduce_scatter");
  const int d = normalize(input.shape(), dim, "reduce_scatter");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "reduce_scatter");
  const OutputSpec spec = reduce_scatter_spec(input, g, d, op);
  check_output(output, spec, input, "reduce_scatter");
  const Tensor& in = input.local();
  Tensor& out = output.local();
  run_collective(input, g, "reduce_scatter", d, op, topology, num_links, options, [&](ccl::CallContext& ctx) {
    const int n = g.size;
    const ccl::Reduction red = reduction_for(in.dtype(), op, n, options);
    const auto runs = slice_runs(in.shape(), in.layout(), d, n);
    ccl::ScratchScope scratch;
    if (runs) {
      const int64_t per_slice = runs->outer * runs->run;  // = the output's storage elements
      const std::byte* src = in.data<std::byte>();
      if (!(native(in.dtype()) && runs->outer == 1)) {
        // Slice-major compute buffer: slice j = its runs, back to back.
        const std::byte* values = src;
        if (!native(in.dtype())) {
          std::byte* decoded = scratch.acquire(static_cast<size_t>(storage_elements(in)) * 4);
          storage_to_compute(in, decoded);
          values = decoded;
        }
        if (runs->outer == 1) {
          src = values;
        } else {
          std::byte* sliced = scratch.acquire(static_cast<size_t>(per_slice) * n * 4);
          const size_t run = static_cast<size_t>(runs->run) * 4;
          for (int j = 0; j < n; ++j)
            for (int64_t k = 0; k < runs->outer; ++k)
              std::memcpy(sliced + (j * runs->outer + k) * run, values + (k * n + j) * run, run);
          src = sliced;
        }
      }
      if (native(out.dtype())) {
        ccl::reduce_scatter_values(ctx, src, out.data<std::byte>(), per_slice, red);
      } else {
        std::byte* result = scratch.acquire(static_cast<size_t>(per_slice) * 4);
        ccl::reduce_scatter_values(ctx, src, result, per_slice, red);
        compute_to_storage(result, out);
      }
      return;
    }
    // Tiles cut by the slices: go through row-major logical values.
    const Shape& shape = in.shape();
    const int64_t outer = shape.outer_volume(d), run = shape[d] / n * shape.inner_volume(d);
    std::vector<uint32_t> logical(static_cast<size_t>(shape.volume()));
    if (in.dtype() == DataType::INT32) {
      auto v = in.to_int32();
      std::memcpy(logical.data(), v.data(), v.size() * 4);
    } else if (in.dtype() == DataType::UINT32) {
      auto v = in.to_uint32();
      std::memcpy(logical.data(), v.data(), v.size() * 4);
    } else {
      auto v = in.to_float();
      std::memcpy(logical.data(), v.data(), v.size() * 4);
    }
    std::vector<uint32_t> sliced(logical.size()), result(static_cast<size_t>(outer * run));
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < outer; ++k)
        std::memcpy(&sliced[(j * outer + k) * run], &logical[(k * n + j) * run], static_cast<size_t>(run) * 4);
    ccl::reduce_scatter_values(ctx, sliced.data(), result.data(), outer * run, red);
    if (in.dtype() == DataType::INT32) {
      std::vector<int32_t> v(result.size());
      std::memcpy(v.data(), result.data(), v.size() * 4);
      out = Tensor::from_int32(v, spec.local, in.layout());
    } else if (in.dtype() == DataType::UINT32) {
      out = Tensor::from_uint32(result, spec.local, in.layout());
    } else {
      std::vector<float> v(result.size());
      std::memcpy(v.data(), result.data(), v.size() * 4);
      out = Tensor::from_float(v, spec.local, in.dtype(), in.layout());
    }
  });
}

MeshTensor reduce_scatter(const MeshTensor& input, int dim, ReduceOp op, std::optional<int> cluster_axis,
                          std::optional<Topology> topology, int num_links, const CclOptions& options) {
  check_common(input, num_links, "reduce_scatter");
  const int d = normalize(input.shape(), dim, "reduce_scatter");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "reduce_scatter");
  const OutputSpec spec = reduce_scatter_spec(input, g, d, op);
  MeshTensor output(input.mesh(), spec.global, spec.placements, Tensor(spec.local, input.dtype(), input.layout()));
  reduce_scatter_into(input, output, dim, op, cluster_axis, topology, num_links, options);
  return output;
}

// ---------------- all_reduce ----------------

void all_reduce_into(const MeshTensor& input, MeshTensor& output, ReduceOp op, std::optional<int> cluster_axis,
                     std::optional<Topology> topology, int num_links, const CclOptions& options) {
  check_common(input, num_links, "all_reduce");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "all_reduce");
  const OutputSpec spec = all_reduce_spec(input, g, op);
  check_output(output, spec, input, "all_reduce");
  MESHNN_CHECK(&input.local() != &output.local(), "all_reduce_into: input and output must be different tensors");
  const Tensor& in = input.local();
  Tensor& out = output.local();
  run_collective(input, g, "all_reduce", 0, op, topology, num_links, options, [&](ccl::CallContext& ctx) {
    // Elementwise: any storage order will do (TILE padding reduces along, block floats in face order).
    const ccl::Reduction red = reduction_for(in.dtype(), op, g.size, options);
    const int64_t count = storage_elements(in);
    if (native(in.dtype())) {
      ccl::all_reduce_values(ctx, in.data<std::byte>(), out.data<std::byte>(), count, red);
      return;
    }
    ccl::ScratchScope scratch;
    std::byte* values = scratch.acquire(static_cast<size_t>(count) * 4);
    std::byte* result = scratch.acquire(static_cast<size_t>(count) * 4);
    storage_to_compute(in, values);
    ccl::all_reduce_values(ctx, values, result, count, red);
    compute_to_storage(result, out);
  });
}

MeshTensor all_reduce(const MeshTensor& input, ReduceOp op, std::optional<int> cluster_axis,
                      std::optional<Topology> topology, int num_links, const CclOptions& options) {
  check_common(input, num_links, "all_reduce");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "all_reduce");
  const OutputSpec spec = all_reduce_spec(input, g, op);
  MeshTensor output(input.mesh(), spec.global, spec.placements, Tensor(spec.local, input.dtype(), input.layout()));
  all_reduce_into(input, output, op, cluster_axis, topology, num_links, options);
  return output;
}

ccl::Schedule planned_schedule(const MeshTensor& input, Collective collective, std::optional<int> cluster_axis,
                               std::optional<Topology> topology, const CclOptions& options) {
  const Group g = resolve_group(input.mesh_device(), cluster_axis, ccl::to_string(collective));
  const size_t bytes = collective == Collective::AllGather ? input.local().size_bytes()
                                                           : static_cast<size_t>(storage_elements(input.local())) * 4;
  return ccl::choose_schedule(collective, g.size, bytes, topology.value_or(input.mesh_device().topology()), options);
}

}  // namespace meshnn
