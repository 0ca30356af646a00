// The mesh-tensor collectives: validate (no communication), compute the output spec (pure), bring
// the local shard into the buffer form a schedule wants, run it, and convert back.
#include "meshnn/ccl/ccl.hpp"

#include <fmt/format.h>

#include <cstring>
#include <functional>

#include "checked_mode.hpp"
#include "meshnn/ccl/plan.hpp"
#include "meshnn/ccl/specs.hpp"
#include "storage_views.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

using ccl::Collective;
using ccl::Group;
using ccl::OutputSpec;
using namespace ccl::detail;
using ccl::all_reduce_spec;
using ccl::all_to_all_spec;
using ccl::check_common;
using ccl::check_output;
using ccl::gather_spec;
using ccl::member_id;
using ccl::normalize;
using ccl::reduce_scatter_spec;
using ccl::resolve_group;

// Shared by all: transport + tags + checked mode, then `body`. out_dim: all_to_all's (-1 otherwise).
template <class Body>
void run_collective(const MeshTensor& in, const Group& g, std::string_view op, int dim, int out_dim, ReduceOp rop,
                    std::optional<Topology> topology, int num_links, const CclOptions& options, Body&& body) {
  MeshDevice& mesh = in.mesh_device();
  const Topology topo = topology.value_or(mesh.topology());
  // Names are formatted only if the watchdog needs one.
  ccl::MpiTransport transport(g.comm, g.transport, [&g, &mesh](int k) {
    const int id = member_id(mesh, g, k);
    return fmt::format("device {} {}", id, mesh.coordinate_of(id).to_string());
  });
  // The argument exchange is an operation of its own (its own tags), then the collective.
  if (checked_mode(options))
    check_arguments_agree(transport, ccl::tag_base_for(mesh.next_operation_id(), transport),
                          describe_args(in, op, dim, out_dim, rop, g, topo, num_links, options), std::string(op));
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

}  // namespace

// ---------------- all_gather ----------------

namespace {

// all_gather_into, and all_gather_into_each when on_shard is set.
void gather_into(const MeshTensor& input, MeshTensor& output, int dim, std::optional<int> cluster_axis,
                 std::optional<Topology> topology, int num_links, const CclOptions& options,
                 const std::function<void(int member, const Tensor& shard)>& on_shard) {
  check_common(input, num_links, "all_gather");
  const int d = normalize(input.shape(), dim, "all_gather");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "all_gather");
  const OutputSpec spec = gather_spec(input, g, d);
  check_output(output, spec, input, "all_gather");
  const Tensor& in = input.local();
  Tensor& out = output.local();
  run_collective(input, g, "all_gather", d, -1, ReduceOp::SUM, topology, num_links, options,
                 [&](ccl::CallContext& ctx) {
    const int n = g.size;
    const auto runs = slice_runs(spec.local, in.layout(), d, n);
    const bool in_place = runs && runs->outer == 1;  // shards consecutive in the output's storage
    if (in_place && !on_shard) {  // the common case (and a decode step's): straight into the output
      ccl::all_gather_bytes(ctx, in.data<std::byte>(), in.size_bytes(), out.data<std::byte>());
      return;
    }
    ccl::ScratchScope scratch;
    std::byte* blocks = in_place ? out.data<std::byte>() : scratch.acquire(in.size_bytes() * n);
    if (on_shard) {
      // Member j's block is its shard as stored: hand it over as a tensor of the input's shape.
      ccl::all_gather_bytes_each(ctx, in.data<std::byte>(), in.size_bytes(), blocks, [&](int j) {
        if (j == g.position) return on_shard(j, in);
        on_shard(j, tensor_from_bytes(in.shape(), in.dtype(), in.layout(), blocks + j * in.size_bytes()));
      });
    } else {
      ccl::all_gather_bytes(ctx, in.data<std::byte>(), in.size_bytes(), blocks);
    }
    if (in_place) return;
    // Interleaved runs of whole tiles (bit-exact), or through concat() when tiles are cut.
    join_parts(blocks, in.shape(), d, n, out);
  });
}

}  // namespace

void all_gather_into(const MeshTensor& input, MeshTensor& output, int dim, std::optional<int> cluster_axis,
                     std::optional<Topology> topology, int num_links, const CclOptions& options) {
  gather_into(input, output, dim, cluster_axis, topology, num_links, options, {});
}

void all_gather_into_each(const MeshTensor& input, MeshTensor& output, int dim,
                          const std::function<void(int member, const Tensor& shard)>& on_shard,
                          std::optional<int> cluster_axis, std::optional<Topology> topology, int num_links,
                          const CclOptions& options) {
  MESHNN_CHECK(on_shard, "all_gather_into_each needs a shard consumer");
  gather_into(input, output, dim, cluster_axis, topology, num_links, options, on_shard);
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
  run_collective(input, g, "reduce_scatter", d, -1, op, topology, num_links, options, [&](ccl::CallContext& ctx) {
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

void reduce_scatter_into_each(const MeshTensor& input, MeshTensor& output, int dim,
                              const std::function<Tensor(int member)>& produce, std::optional<int> cluster_axis,
                              std::optional<Topology> topology, int num_links, const CclOptions& options) {
  MESHNN_CHECK(produce, "reduce_scatter_into_each needs a slice producer");
  check_common(input, num_links, "reduce_scatter");
  const int d = normalize(input.shape(), dim, "reduce_scatter");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "reduce_scatter");
  const OutputSpec spec = reduce_scatter_spec(input, g, d, ReduceOp::SUM);
  check_output(output, spec, input, "reduce_scatter");
  const auto runs = slice_runs(input.local().shape(), input.layout(), d, g.size);
  MESHNN_CHECK(input.dtype() == DataType::FLOAT32 && runs,
               "reduce_scatter_into_each: the input must be float32 and its slices whole tiles (got {} {} cut {} ways "
               "on dim {})",
               to_string(input.dtype()), input.local().shape(), g.size, d);
  Tensor& out = output.local();
  run_collective(input, g, "reduce_scatter", d, -1, ReduceOp::SUM, topology, num_links, options, [&](ccl::CallContext& ctx) {
    const ccl::Reduction red = reduction_for(DataType::FLOAT32, ReduceOp::SUM, g.size, options);
    const int64_t per_slice = runs->outer * runs->run;
    const size_t slice_bytes = static_cast<size_t>(per_slice) * 4;
    ccl::ScratchScope scratch;
    // Slice-major, as reduce_scatter_into lays the input out: a slice's float32 tiles are its
    // runs back to back, i.e. the storage of the slice as a tensor of its own.
    std::byte* slices = scratch.acquire(slice_bytes * g.size);
    ccl::reduce_scatter_values_each(ctx, slices, out.data<std::byte>(), per_slice, red, [&](int j) {
      const Tensor slice = produce(j);
      MESHNN_CHECK(slice.shape() == spec.local && slice.dtype() == DataType::FLOAT32 && slice.layout() == Layout::TILE,
                   "reduce_scatter_into_each: slice {} is {} {}, expected float32 {} in TILE layout", j, slice.shape(),
                   to_string(slice.dtype()), spec.local);
      copy_bytes(slices + slice_bytes * j, slice.data<std::byte>(), slice_bytes);
    });
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
  run_collective(input, g, "all_reduce", 0, -1, op, topology, num_links, options, [&](ccl::CallContext& ctx) {
    // Elementwise: any storage order will do (TILE padding reduces along, block floats in face order).
    const ccl::Reduction red = reduction_for(in.dtype(), op, g.size, options);
    const int64_t count = storage_elements(in);
    if (native(in.dtype())) {
      ccl::all_reduce_values(ctx, in.data<std::byte>(), out.data<std::byte>(), count, red);
      return;
    }
    if (in.dtype() == DataType::BFLOAT16 &&
        ccl::all_reduce_bfloat16_pair(ctx, in.data<uint16_t>(), out.data<uint16_t>(), count, red))
      return;
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
  // all_reduce_into writes the whole storage, padding included: no zero-fill first.
  MeshTensor output(input.mesh(), spec.global, spec.placements,
                    Tensor::uninitialized(spec.local, input.dtype(), input.layout()));
  all_reduce_into(input, output, op, cluster_axis, topology, num_links, options);
  return output;
}

// ---------------- all_to_all ----------------

void all_to_all_into(const MeshTensor& input, MeshTensor& output, int in_dim, int out_dim,
                     std::optional<int> cluster_axis, std::optional<Topology> topology, int num_links,
                     const CclOptions& options) {
  check_common(input, num_links, "all_to_all");
  const int di = normalize(input.shape(), in_dim, "all_to_all"), dout = normalize(input.shape(), out_dim, "all_to_all");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "all_to_all");
  const OutputSpec spec = all_to_all_spec(input, g, di, dout);
  check_output(output, spec, input, "all_to_all");
  const Tensor& in = input.local();
  Tensor& out = output.local();
  run_collective(input, g, "all_to_all", di, dout, ReduceOp::SUM, topology, num_links, options,
                 [&](ccl::CallContext& ctx) {
    const int n = g.size;
    // Block j: part j of our shard along out_dim, for member j; it arrives as part `position` of
    // member j's, which is block j of our output along in_dim.
    Shape part = in.shape();
    part[dout] = part[dout] / n;
    const size_t block = Tensor::storage_bytes(part, in.dtype(), in.layout());
    const auto send_runs = slice_runs(in.shape(), in.layout(), dout, n);
    const auto recv_runs = slice_runs(spec.local, out.layout(), di, n);
    ccl::ScratchScope scratch;
    // Where the blocks already lie one after another in storage, send from and receive into the
    // tensors themselves.
    const std::byte* send = in.data<std::byte>();
    if (!send_runs || send_runs->outer != 1) {
      std::byte* packed = scratch.acquire(block * n);
      split_parts(in, dout, n, packed);
      send = packed;
    }
    const bool straight_in = recv_runs && recv_runs->outer == 1;
    std::byte* received = straight_in ? out.data<std::byte>() : scratch.acquire(block * n);
    ccl::all_to_all_bytes(ctx, send, block, received);
    if (!straight_in) join_parts(received, part, di, n, out);
  });
}

MeshTensor all_to_all(const MeshTensor& input, int in_dim, int out_dim, std::optional<int> cluster_axis,
                      std::optional<Topology> topology, int num_links, const CclOptions& options) {
  check_common(input, num_links, "all_to_all");
  const int di = normalize(input.shape(), in_dim, "all_to_all"), dout = normalize(input.shape(), out_dim, "all_to_all");
  const Group g = resolve_group(input.mesh_device(), cluster_axis, "all_to_all");
  const OutputSpec spec = all_to_all_spec(input, g, di, dout);
  MeshTensor output(input.mesh(), spec.global, spec.placements, Tensor(spec.local, input.dtype(), input.layout()));
  all_to_all_into(input, output, in_dim, out_dim, cluster_axis, topology, num_links, options);
  return output;
}

ccl::Schedule planned_schedule(const MeshTensor& input, Collective collective, std::optional<int> cluster_axis,
                               std::optional<Topology> topology, const CclOptions& options) {
  const Group g = resolve_group(input.mesh_device(), cluster_axis, ccl::to_string(collective));
  const size_t shard = input.local().size_bytes();
  const size_t bytes = collective == Collective::ALL_GATHER   ? shard
                       : collective == Collective::ALL_TO_ALL ? shard / g.size
                                                              : static_cast<size_t>(storage_elements(input.local())) * 4;
  return ccl::choose_schedule(collective, g.size, bytes, topology.value_or(input.mesh_device().topology()), g.transport,
                              options);
}

}  // namespace meshnn
