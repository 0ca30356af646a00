// all_gather / reduce_scatter / all_reduce / all_to_all on mesh tensors under MPI (and broadcast on
// plain buffers against MPI_Bcast): a CI-sized selection of
// docs/spec/collective-cases.md (§4 lists it) in every dtype and both layouts, on every mesh shape
// of this rank count and every cluster_axis. Verdicts are combined over ranks before any assertion.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/ccl/transport.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/tensor/tile_layout.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::all_ranks_ok;
using testing::same_on_all_ranks;
using testing::seeded_tensor;
using testing::world_rank;
using testing::world_size;

struct Config {
  MeshShape shape;
  std::optional<int> axis;
  std::string name() const { return shape.to_string() + (axis ? " axis " + std::to_string(*axis) : " axis none"); }
};

std::vector<Config> configs() {
  const int n = world_size();
  std::vector<Config> c = {{{1, n}, std::nullopt}, {{1, n}, 1}};
  if (n >= 4) {
    const MeshShape two{2, n / 2};
    c.push_back({two, 0});
    c.push_back({two, 1});
    c.push_back({two, std::nullopt});
  } else {
    c.push_back({{n, 1}, 0});
  }
  return c;
}

struct GroupInfo {
  int size, position;
  std::vector<int> axes;
  MPI_Comm comm;
};
GroupInfo group_of(const MeshDevice& mesh, std::optional<int> axis) {
  if (axis) return {mesh.axis_size(*axis), mesh.axis_position(*axis), {*axis}, mesh.axis_comm(*axis)};
  return {mesh.num_devices(), mesh.device_id(), {0, 1}, mesh.comm()};
}

std::vector<DataType> dtypes_for(Layout layout) {
  if (layout == Layout::TILE)
    return {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B, DataType::BFLOAT4_B, DataType::INT32};
  return {DataType::FLOAT32, DataType::BFLOAT16, DataType::UINT32};
}

// Would the shards cut tiles (then block floats are requantised: PCC instead of bit equality)?
bool cuts_tiles(const Shape& shard, Layout layout, int d) {
  if (layout == Layout::ROW_MAJOR) return false;
  const int r = shard.rank();
  return (d >= r - 2 || r == 1) && shard[d] % kTileWidth != 0;
}

struct GatherCase {
  Shape global;
  int dim;
};

// ---------------- all_gather ----------------

TEST(CclMpiAllGather, CasesEveryDtypeLayoutAxis) {
  const std::vector<GatherCase> cases = {
      {Shape{4, 1, 33, 256}, 0}, {Shape{4, 1, 256, 32}, 0}, {Shape{8, 5, 13, 512}, 3}, {Shape{8, 5, 32, 384}, -1},
      {Shape{1, 1, 32, 4096}, 3}, {Shape{1, 1, 128, 1024}, 2}, {Shape{1, 1, 1024, 128}, 3}, {Shape{8, 8, 32, 384}, 1},
      {Shape{1, 1, 8192, 32}, -2}};
  for (const Config& cfg : configs()) {
    auto mesh = MeshDevice::open(cfg.shape);
    const GroupInfo g = group_of(*mesh, cfg.axis);
    for (Topology topo : {Topology::RING, Topology::LINEAR}) {
      for (const GatherCase& c : cases) {
        const int d = c.dim < 0 ? c.dim + c.global.rank() : c.dim;
        if (c.global[d] % g.size != 0) continue;
        for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
          for (DataType dtype : dtypes_for(layout)) {
            const Tensor host = seeded_tensor(c.global, dtype, layout, 7);
            Placements pl{Replicate{}, Replicate{}};
            for (int a : g.axes) pl[a] = Shard{c.dim};
            MeshMapperConfig mapper;
            mapper.placements = pl;
            const MeshTensor in = distribute_tensor(host, mapper, mesh);
            const MeshTensor out = all_gather(in, c.dim, cfg.axis, topo);
            bool ok = out.shape() == c.global && out.local().shape() == c.global;
            for (int a : g.axes) ok = ok && is_replicate(out.placement(a));
            const Shape shard = in.shard_shape();
            if (ok && is_block_float(dtype) && cuts_tiles(shard, layout, d)) {
              ok = pcc(host, out.local()) >= 0.9999;
            } else if (ok) {
              ok = testing::bitwise_equal(out.local(), host) &&
                   std::memcmp(out.local().data<std::byte>(), host.data<std::byte>(), host.size_bytes()) == 0;
            }
            EXPECT_TRUE(all_ranks_ok(ok)) << cfg.name() << " " << to_string(topo) << " " << c.global.to_string() << " dim "
                                          << c.dim << " " << to_string(dtype) << " " << to_string(layout);
          }
        }
      }
    }
  }
}

// ---------------- all_to_all ----------------

// What all_to_all must give, by MPI: our shard cut into the group's parts along out_dim (slice()),
// their bytes exchanged by MPI_Alltoall, and the parts received joined along in_dim (concat()).
Tensor all_to_all_by_mpi(const Tensor& shard, int in_dim, int out_dim, const GroupInfo& g) {
  const int n = g.size;
  const int64_t part = shard.shape()[out_dim] / n;
  std::vector<Tensor> parts;
  for (int j = 0; j < n; ++j) parts.push_back(slice(shard, out_dim, j * part, (j + 1) * part));
  const size_t block = parts[0].size_bytes();
  std::vector<std::byte> sent(block * n), received(block * n);
  for (int j = 0; j < n; ++j) std::memcpy(sent.data() + j * block, parts[j].data<std::byte>(), block);
  MPI_Alltoall(sent.data(), static_cast<int>(block), MPI_BYTE, received.data(), static_cast<int>(block), MPI_BYTE,
               g.comm);
  for (int j = 0; j < n; ++j) std::memcpy(parts[j].data<std::byte>(), received.data() + j * block, block);
  return concat(parts, in_dim);
}

struct AllToAllCase {
  Shape global;
  int in_dim, out_dim;
};

TEST(CclMpiAllToAll, CasesEveryDtypeLayoutAxisAgainstMpiAlltoall) {
  // Tile-aligned cuts (whole tiles move), and cuts through tiles on either side (out_dim 3 of 48,
  // in_dim 2 of 48 rows).
  const std::vector<AllToAllCase> cases = {
      {Shape{8, 2, 32, 256}, 0, 3}, {Shape{1, 1, 256, 512}, 2, 3}, {Shape{1, 1, 256, 512}, -1, -2},
      {Shape{16, 8, 64}, 1, 0},     {Shape{1, 8, 40, 48}, 1, 3},   {Shape{2, 1, 48, 64}, 2, 3},
      {Shape{64, 128}, 0, 1}};
  CclOptions chunked;
  chunked.chunk_bytes = 1024;  // several chunks per block: the Plan path
  for (const Config& cfg : configs()) {
    auto mesh = MeshDevice::open(cfg.shape);
    const GroupInfo g = group_of(*mesh, cfg.axis);
    for (const AllToAllCase& c : cases) {
      const int di = c.in_dim < 0 ? c.in_dim + c.global.rank() : c.in_dim;
      const int dout = c.out_dim < 0 ? c.out_dim + c.global.rank() : c.out_dim;
      if (c.global[di] % g.size != 0 || c.global[dout] % g.size != 0) continue;
      for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
        for (DataType dtype : dtypes_for(layout)) {
          for (const CclOptions& opts : {CclOptions{}, chunked}) {
            const Tensor host = seeded_tensor(c.global, dtype, layout, 11);
            Placements pl{Replicate{}, Replicate{}};
            for (int a : g.axes) pl[a] = Shard{di};
            MeshMapperConfig mapper;
            mapper.placements = pl;
            const MeshTensor in = distribute_tensor(host, mapper, mesh);
            const MeshTensor out = all_to_all(in, c.in_dim, c.out_dim, cfg.axis, std::nullopt, 2, opts);
            const Tensor want = all_to_all_by_mpi(in.local(), di, dout, g);
            bool ok = out.shape() == c.global && out.local().shape() == want.shape() &&
                      std::memcmp(out.local().data<std::byte>(), want.data<std::byte>(), want.size_bytes()) == 0;
            for (int a : g.axes) ok = ok && out.placement(a) == Placement{Shard{dout}};
            // And the meaning: our part of the whole tensor along out_dim.
            const int64_t part = c.global[dout] / g.size;
            const Tensor mine = slice(host, dout, g.position * part, (g.position + 1) * part);
            // Parts cut along out_dim have out's extent there; parts joined along in_dim, in's.
            const bool requantised = is_block_float(dtype) && (cuts_tiles(out.local().shape(), layout, dout) ||
                                                               cuts_tiles(in.local().shape(), layout, di));
            if (ok) ok = requantised ? pcc(mine, out.local()) >= 0.9999 : testing::bitwise_equal(out.local(), mine);
            EXPECT_TRUE(all_ranks_ok(ok)) << cfg.name() << " " << c.global.to_string() << " dims " << c.in_dim << "->"
                                          << c.out_dim << " " << to_string(dtype) << " " << to_string(layout)
                                          << " chunk " << opts.chunk_bytes;
          }
        }
      }
    }
  }
}

TEST(CclMpiAllToAll, IntoReusesTheOutputAndRoundTrips) {
  for (const Config& cfg : configs()) {
    auto mesh = MeshDevice::open(cfg.shape);
    const GroupInfo g = group_of(*mesh, cfg.axis);
    const Shape shape{1, 2, 32 * g.size, 32 * g.size};
    const Tensor host = seeded_tensor(shape, DataType::BFLOAT8_B, Layout::TILE, 21);
    Placements pl{Replicate{}, Replicate{}};
    for (int a : g.axes) pl[a] = Shard{2};
    MeshMapperConfig mapper;
    mapper.placements = pl;
    const MeshTensor in = distribute_tensor(host, mapper, mesh);
    MeshTensor out = all_to_all(in, 2, 3, cfg.axis);
    const std::byte* storage = out.local().data<std::byte>();
    all_to_all_into(in, out, 2, 3, cfg.axis);
    const MeshTensor back = all_to_all(out, 3, 2, cfg.axis);
    const Tensor& original = in.local();
    const bool ok = out.local().data<std::byte>() == storage &&
                    std::memcmp(back.local().data<std::byte>(), original.data<std::byte>(), original.size_bytes()) == 0;
    EXPECT_TRUE(all_ranks_ok(ok)) << cfg.name();
  }
}

// ---------------- reductions ----------------

// Member k of the group contributes seeded_tensor(shape, seed + k): identical on every device with
// the same group position, so the other mesh axis really is replicated.
MeshTensor contribution(const MeshDevicePtr& mesh, const Shape& shape, DataType dtype, Layout layout,
                        const GroupInfo& g, ReduceOp op, uint64_t seed, bool ones) {
  Tensor local = ones ? Tensor::from_float(std::vector<float>(shape.volume(), 1.0f), shape, dtype, layout)
                      : seeded_tensor(shape, dtype, layout, seed + g.position);
  Placements pl{Replicate{}, Replicate{}};
  for (int a : g.axes) pl[a] = Partial{op};
  return MeshTensor(mesh, shape, pl, std::move(local));
}

// float64 reduction of every member's contribution, logical row-major order.
std::vector<double> reference(const Shape& shape, DataType dtype, Layout layout, const GroupInfo& g, ReduceOp op,
                              uint64_t seed, bool ones) {
  std::vector<double> acc(shape.volume(), 0.0);
  for (int k = 0; k < g.size; ++k) {
    const std::vector<float> v = ones ? std::vector<float>(shape.volume(), 1.0f)
                                      : seeded_tensor(shape, dtype, layout, seed + k).to_float();
    for (size_t i = 0; i < v.size(); ++i) {
      if (k == 0 || op == ReduceOp::SUM || op == ReduceOp::MEAN) {
        acc[i] = k == 0 ? v[i] : acc[i] + v[i];
      } else {
        acc[i] = op == ReduceOp::MAX ? std::max(acc[i], static_cast<double>(v[i])) : std::min(acc[i], static_cast<double>(v[i]));
      }
    }
  }
  if (op == ReduceOp::MEAN)
    for (double& x : acc) x /= g.size;
  return acc;
}

// Slice p (of n) of row-major values along d.
std::vector<double> slice_of(const std::vector<double>& v, const Shape& shape, int d, int n, int p) {
  const int64_t outer = shape.outer_volume(d), run = shape[d] / n * shape.inner_volume(d);
  std::vector<double> out;
  for (int64_t k = 0; k < outer; ++k)
    for (int64_t i = 0; i < run; ++i) out.push_back(v[(k * n + p) * run + i]);
  return out;
}

// Max error relative to the largest reference magnitude; tolerance per output dtype.
double max_rel_error(const std::vector<double>& ref, const std::vector<float>& got) {
  double scale = 1e-30, err = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::abs(ref[i] - got[i]));
  return err / scale;
}
double tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::BFLOAT16: return 8e-3;
    case DataType::BFLOAT8_B: return 3e-2;
    case DataType::BFLOAT4_B: return 0.3;
    case DataType::FLOAT32: return 1e-6;
    default: return 0;
  }
}

struct ReduceCase {
  Shape out_shape;  // per device output (reduce_scatter) / per device shape (all_reduce)
  int dim;
};

TEST(CclMpiReduceScatter, CasesEveryDtypeLayoutAxis) {
  const std::vector<ReduceCase> cases = {{Shape{1, 2, 32, 256}, 3}, {Shape{1, 1, 32, 256}, 3}, {Shape{1, 1, 224, 128}, -1},
                                         {Shape{1, 1, 32, 1280}, 1}, {Shape{1, 1, 64, 48}, 2}, {Shape{2, 3, 5, 7}, 0}};
  double worst[6] = {0};
  for (const Config& cfg : configs()) {
    auto mesh = MeshDevice::open(cfg.shape);
    const GroupInfo g = group_of(*mesh, cfg.axis);
    for (Topology topo : {Topology::RING, Topology::LINEAR}) {
      for (const ReduceCase& c : cases) {
        const int d = c.dim < 0 ? c.dim + c.out_shape.rank() : c.dim;
        Shape in_shape = c.out_shape;
        in_shape[d] = in_shape[d] * g.size;
        for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
          for (DataType dtype : dtypes_for(layout)) {
            for (bool ones : {false, true}) {
              const ReduceOp op = ReduceOp::SUM;
              const MeshTensor in = contribution(mesh, in_shape, dtype, layout, g, op, 100, ones);
              const MeshTensor out = reduce_scatter(in, c.dim, op, cfg.axis, topo);
              bool ok = out.local().shape() == c.out_shape;
              for (int a : g.axes) ok = ok && out.placement(a) == Placement{Shard{d}};
              const auto ref = slice_of(reference(in_shape, dtype, layout, g, op, 100, ones), in_shape, d, g.size, g.position);
              const std::vector<float> got = out.local().to_float();
              const double err = max_rel_error(ref, got);
              ok = ok && err <= (ones ? 0.0 : tolerance(dtype));
              worst[static_cast<int>(dtype)] = std::max(worst[static_cast<int>(dtype)], err);
              EXPECT_TRUE(all_ranks_ok(ok)) << cfg.name() << " " << to_string(topo) << " " << in_shape.to_string() << " dim " << c.dim
                                            << " " << to_string(dtype) << " " << to_string(layout) << " ones=" << ones
                                            << " err=" << err;
            }
          }
        }
      }
    }
  }
  if (world_rank() == 0)
    std::printf("reduce_scatter max relative error: float32 %.3g bfloat16 %.3g bfloat8_b %.3g bfloat4_b %.3g\n", worst[0],
                worst[1], worst[2], worst[3]);
}

TEST(CclMpiAllReduce, CasesEveryDtypeLayoutAxisAndOp) {
  const std::vector<Shape> shapes = {Shape{1, 1, 32, 1024}, Shape{1, 1, 1024, 32}, Shape{1, 4, 64, 32},
                                     Shape{2, 2, 64, 64}, Shape{3, 5, 7}};
  double worst[6] = {0};
  for (const Config& cfg : configs()) {
    auto mesh = MeshDevice::open(cfg.shape);
    const GroupInfo g = group_of(*mesh, cfg.axis);
    for (Topology topo : {Topology::RING, Topology::LINEAR}) {
      for (const Shape& shape : shapes) {
        for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
          for (DataType dtype : dtypes_for(layout)) {
            for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MEAN}) {
              for (bool ones : {false, true}) {
                if (ones && op != ReduceOp::SUM) continue;
                if (is_integer(dtype) && op == ReduceOp::MEAN) continue;
                const MeshTensor in = contribution(mesh, shape, dtype, layout, g, op, 300, ones);
                const MeshTensor out = all_reduce(in, op, cfg.axis, topo);
                bool ok = out.local().shape() == shape;
                for (int a : g.axes) ok = ok && is_replicate(out.placement(a));
                const auto ref = reference(shape, dtype, layout, g, op, 300, ones);
                const double err = max_rel_error(ref, out.local().to_float());
                // max/min of quantised values need no rounding at all.
                const double tol = ones || op == ReduceOp::MAX ? 0.0 : tolerance(dtype);
                ok = ok && err <= tol && same_on_all_ranks(std::string(
                                            reinterpret_cast<const char*>(out.local().data<std::byte>()), 64), g.comm);
                worst[static_cast<int>(dtype)] = std::max(worst[static_cast<int>(dtype)], err);
                EXPECT_TRUE(all_ranks_ok(ok)) << cfg.name() << " " << to_string(topo) << " " << shape.to_string() << " "
                                              << to_string(dtype) << " " << to_string(layout) << " " << to_string(op)
                                              << " ones=" << ones << " err=" << err;
              }
            }
          }
        }
      }
    }
  }
  if (world_rank() == 0)
    std::printf("all_reduce max relative error: float32 %.3g bfloat16 %.3g bfloat8_b %.3g bfloat4_b %.3g\n", worst[0],
                worst[1], worst[2], worst[3]);
}

// A pair's bfloat16 all_reduce ships the bfloat16 inputs (all_reduce_bfloat16_pair); every other
// schedule widens to float32 first. Both must give the same bits: the direct exchange, in several
// chunks and blocks (the slice boundary inside a chunk), against the float32 ring.
TEST(CclMpiAllReduce, Bfloat16OnTheWireGivesTheFloat32PathsBits) {
  for (const Config& cfg : configs()) {
    auto mesh = MeshDevice::open(cfg.shape);
    const GroupInfo g = group_of(*mesh, cfg.axis);
    for (const Shape& shape : {Shape{1, 1, 37, 211}, Shape{1, 1, 64, 96}})
      for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE})
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX, ReduceOp::MEAN}) {
          const MeshTensor in = contribution(mesh, shape, DataType::BFLOAT16, layout, g, op, 700, false);
          CclOptions direct, ring;
          direct.algorithm = Algorithm::DIRECT;
          direct.chunk_bytes = 4032;  // 2016 values a chunk: blocks of 2048 cut short, several chunks
          ring.algorithm = Algorithm::RING;
          const MeshTensor a = all_reduce(in, op, cfg.axis, Topology::RING, 1, direct);
          const MeshTensor b = all_reduce(in, op, cfg.axis, Topology::RING, 1, ring);
          const bool ok = std::memcmp(a.local().data<std::byte>(), b.local().data<std::byte>(), a.local().size_bytes()) == 0;
          EXPECT_TRUE(all_ranks_ok(ok)) << cfg.name() << " " << shape.to_string() << " " << to_string(layout) << " "
                                        << to_string(op);
        }
  }
}

// ---------------- float32 sum against MPI's own collectives ----------------

TEST(CclMpiAgainstMpi, Float32SumElementByElement) {
  for (const Config& cfg : configs()) {
    auto mesh = MeshDevice::open(cfg.shape);
    const GroupInfo g = group_of(*mesh, cfg.axis);
    for (Algorithm algo : {Algorithm::AUTO, Algorithm::RING, Algorithm::BIDIRECTIONAL_RING, Algorithm::LINE, Algorithm::DIRECT}) {
      CclOptions opts;
      opts.algorithm = algo;
      opts.chunk_bytes = 4096;  // several pipelined chunks even at CI sizes
      const int64_t count = 3 * 1024 + 64;
      const Shape shape{1, count * g.size};
      // Integer-valued data: every order of summation is exact, so MPI and we must agree bit for bit.
      std::vector<float> mine = testing::seeded_values(shape.volume(), 900 + g.position, true);
      Placements pl{Replicate{}, Replicate{}};
      for (int a : g.axes) pl[a] = Partial{};
      const MeshTensor in(mesh, shape, pl, Tensor::from_float(mine, shape, DataType::FLOAT32, Layout::ROW_MAJOR));

      std::vector<float> mpi_rs(count), mpi_ar(shape.volume()), mpi_ag(shape.volume() * g.size);
      MPI_Reduce_scatter_block(mine.data(), mpi_rs.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, g.comm);
      MPI_Allreduce(mine.data(), mpi_ar.data(), static_cast<int>(shape.volume()), MPI_FLOAT, MPI_SUM, g.comm);

      const MeshTensor rs = reduce_scatter(in, 1, ReduceOp::SUM, cfg.axis, std::nullopt, 2, opts);
      const MeshTensor ar = all_reduce(in, ReduceOp::SUM, cfg.axis, std::nullopt, 2, opts);
      bool ok = std::memcmp(rs.local().data<float>(), mpi_rs.data(), count * 4) == 0 &&
                std::memcmp(ar.local().data<float>(), mpi_ar.data(), mpi_ar.size() * 4) == 0;

      // all_gather of each member's piece against MPI_Allgather.
      Placements sh{Replicate{}, Replicate{}};
      for (int a : g.axes) sh[a] = Shard{1};
      const Shape gathered{1, count * g.size * g.size};
      const MeshTensor piece(mesh, gathered, sh, Tensor::from_float(mine, shape, DataType::FLOAT32, Layout::ROW_MAJOR));
      MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, mpi_ag.data(), static_cast<int>(mine.size()),
                    MPI_FLOAT, g.comm);
      const MeshTensor ag = all_gather(piece, 1, cfg.axis, std::nullopt, 2, opts);
      ok = ok && std::memcmp(ag.local().data<float>(), mpi_ag.data(), mpi_ag.size() * 4) == 0;
      EXPECT_TRUE(all_ranks_ok(ok)) << cfg.name() << " " << ccl::to_string(algo);
    }
  }
}

TEST(CclMpiDeterminism, RandomFloatsBitwiseRepeatable) {
  auto mesh = MeshDevice::open({1, world_size()});
  const GroupInfo g = group_of(*mesh, std::nullopt);
  const Shape shape{1, 1, 64, 1024};
  const MeshTensor in = contribution(mesh, shape, DataType::FLOAT32, Layout::ROW_MAJOR, g, ReduceOp::SUM, 5, false);
  CclOptions opts;
  opts.chunk_bytes = 8192;
  const MeshTensor a = all_reduce(in, ReduceOp::SUM, std::nullopt, std::nullopt, 1, opts);
  const MeshTensor b = all_reduce(in, ReduceOp::SUM, std::nullopt, std::nullopt, 1, opts);
  const std::string bytes(reinterpret_cast<const char*>(a.local().data<std::byte>()), a.local().size_bytes());
  const bool ok = std::memcmp(a.local().data<std::byte>(), b.local().data<std::byte>(), a.local().size_bytes()) == 0 &&
                  same_on_all_ranks(bytes);
  EXPECT_TRUE(all_ranks_ok(ok));
}

// ---------------- invalid calls ----------------

// The error must be thrown on every rank, with the same message containing `needle`.
bool same_error_everywhere(const std::string& message, const std::string& needle) {
  const bool ok = !message.empty() && message.find(needle) != std::string::npos;
  return all_ranks_ok(ok) && same_on_all_ranks(message);
}

TEST(CclMpiErrors, SameErrorOnEveryRankAndMeshStillWorks) {
  auto mesh = MeshDevice::open({1, world_size()});
  const int n = world_size();
  const Shape shape{1, 1, 32, 64 * n};
  const MeshTensor sharded = distribute_tensor(seeded_tensor(shape, DataType::FLOAT32, Layout::ROW_MAJOR, 1),
                                               ShardTensorToMesh(3), mesh);
  const MeshTensor partial(mesh, Shape{1, 1, 32, 3 * n + 1}, {Partial{}, Partial{}},
                           seeded_tensor(Shape{1, 1, 32, 3 * n + 1}, DataType::FLOAT32, Layout::ROW_MAJOR, 2));
  using testing::error_message_of;
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_gather(sharded, 4); }), "dim 4 is out of range"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_gather(sharded, -5); }), "dim -5 is out of range"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { reduce_scatter(partial, 3); }), "does not divide over"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_gather(sharded, 3, 0); }), "groups a single device"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_gather(sharded, 3, 2); }), "cluster_axis must be 0 or 1"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_gather(partial, 3); }), "reduce it first"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_reduce(sharded); }), "meaningless"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_gather(sharded, 2); }), "sharded on dim 3"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_reduce(partial, ReduceOp::MAX); }), "Partial(sum)"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_reduce(partial, ReduceOp::SUM, {}, {}, 0); }), "num_links"));
  // all_to_all: a local out_dim that does not divide, an input not sharded on in_dim, the same dim
  // twice.
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_to_all(sharded, 3, 1); }),
                                    "out_dim 1 of size 1 (shard shape [1, 1, 32, 64]) does not divide over"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_to_all(sharded, 2, 3); }), "takes Shard(2)"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_to_all(partial, 3, 2); }), "reduce it first"));
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_to_all(sharded, 3, -1); }), "would not change"));

  // Checked mode: rank 0 passes a different shape; every rank throws the same error.
  CclOptions checked;
  checked.checked = true;
  const Shape mine = world_rank() == 0 ? Shape{1, 1, 32, 64} : Shape{1, 1, 32, 128};
  const MeshTensor odd(mesh, mine, {Partial{}, Partial{}}, seeded_tensor(mine, DataType::FLOAT32, Layout::ROW_MAJOR, 3));
  EXPECT_TRUE(same_error_everywhere(
      error_message_of([&] { all_reduce(odd, ReduceOp::SUM, {}, {}, 1, checked); }), "arguments differ across the group"));
  // Rank 0 splits another dim: each call is valid alone, so only the checked mode can tell.
  const Shape square{n, 1, 32 * n, 64 * n};
  const MeshTensor columns = distribute_tensor(seeded_tensor(square, DataType::FLOAT32, Layout::ROW_MAJOR, 4),
                                               ShardTensorToMesh(3), mesh);
  const int out_dim = world_rank() == 0 ? 0 : 2;
  EXPECT_TRUE(same_error_everywhere(error_message_of([&] { all_to_all(columns, 3, out_dim, {}, {}, 1, checked); }),
                                    "arguments differ across the group"));

  // The mesh still works, checked mode included.
  const MeshTensor ones(mesh, shape, {Partial{}, Partial{}},
                        Tensor::from_float(std::vector<float>(shape.volume(), 1.0f), shape, DataType::FLOAT32, Layout::ROW_MAJOR));
  const MeshTensor sum = all_reduce(ones, ReduceOp::SUM, {}, {}, 1, checked);
  bool ok = true;
  for (float v : sum.local().to_float()) ok = ok && v == static_cast<float>(n);
  const MeshTensor moved = all_to_all(sharded, 3, 2, {}, {}, 1, checked);
  ok = ok && moved.local().shape() == Shape({1, 1, 32 / n, 64 * n});
  EXPECT_TRUE(all_ranks_ok(ok));
}

// ccl::broadcast_bytes over the mesh's communicators (the whole mesh, and each axis of a 2 x n/2
// mesh) against MPI_Bcast of the same bytes: every root, every schedule, sizes from one byte to
// many chunks.
TEST(CclBroadcastMpi, MatchesMpiBcastEveryRootAndSchedule) {
  const int n = world_size();
  std::vector<MeshShape> shapes = {{1, n}};
  if (n >= 4) shapes.push_back({2, n / 2});
  bool ok = true;
  for (MeshShape ms : shapes) {
    auto mesh = MeshDevice::open(ms);
    std::vector<MPI_Comm> comms = {mesh->comm()};
    if (ms.rows > 1) comms = {mesh->axis_comm(0), mesh->axis_comm(1)};
    for (MPI_Comm comm : comms) {
      ccl::MpiTransport transport(comm, detect_transport_kind(comm));
      for (Algorithm algorithm : {Algorithm::AUTO, Algorithm::RING, Algorithm::BIDIRECTIONAL_RING, Algorithm::LINE,
                                  Algorithm::DIRECT})
        for (size_t bytes : {size_t{1}, size_t{3000}, size_t{70001}})
          for (int root = 0; root < transport.size(); ++root) {
            std::vector<uint8_t> mine(bytes), reference(bytes);
            for (size_t i = 0; i < bytes; ++i)
              mine[i] = reference[i] = static_cast<uint8_t>(transport.position() * 29 + root * 7 + i * 13 + (i >> 9));
            ccl::CclOptions o;
            o.algorithm = algorithm;
            o.chunk_bytes = algorithm == Algorithm::AUTO ? 0 : 4096;
            const ccl::CallContext ctx{transport, ccl::tag_base_for(mesh->next_operation_id(), transport),
                                       algorithm == Algorithm::LINE ? Topology::LINEAR : Topology::RING, 2, o, ""};
            ccl::broadcast_bytes(ctx, root, mine.data(), bytes);
            MPI_Bcast(reference.data(), static_cast<int>(bytes), MPI_BYTE, root, comm);
            ok = ok && mine == reference;
          }
    }
  }
  EXPECT_TRUE(all_ranks_ok(ok));
}

}  // namespace
}  // namespace meshnn
