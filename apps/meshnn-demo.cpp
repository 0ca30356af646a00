// meshnn-demo: the smallest whole meshnn program. Opens a mesh (default 1x2), shards a tensor
// across it with ShardTensorToMesh, runs a per-device op on each rank's shard, composes the result
// back with ConcatMeshToTensor and checks it against the single-device result by PCC.
//
//   mpirun -np 2 build/apps/meshnn-demo [--mesh 1x2 (default: 1 x ranks)] [--shape 1,1,64,256] [--dim 3] [--dtype bfloat16]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/runtime/cli.hpp"
#include "meshnn/distributed/distribute.hpp"

namespace {

using namespace meshnn;

struct DemoOptions {
  MeshShape mesh{0, 0};  // default: 1 x (number of ranks)
  Shape shape;           // --shape and --dtype: their defaults are the texts in parse_options
  int dim = -1;
  DataType dtype = DataType::FLOAT32;
};

DemoOptions parse_options(int argc, char** argv) {
  DemoOptions o;
  std::string mesh, shape = "1,1,64,256", dtype = "bfloat16";
  const auto dims = [](const std::string& text) { return parse_int_list(text, 1, int64_t{1} << 31); };
  CLI::App cli("Shards a tensor over a mesh, applies a per-device op, composes it back, checks PCC.", "meshnn-demo");
  cli.add_option("--mesh", mesh, "mesh shape (default: 1 x ranks)")->type_name("RxC")->check(parsed_by(parse_mesh_shape));
  cli.add_option("--shape", shape, "global tensor shape")->type_name("D0,D1,..")->check(parsed_by(dims));
  cli.add_option("--dim", o.dim, "tensor dim to shard (negative counts from the end)")
      ->transform(IntRange(-kMaxRank, kMaxRank));
  cli.add_option("--dtype", dtype, "element type")->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b", "bfloat4_b"}));
  parse_command_line(cli, argc, argv);
  // The checks above let through only what these conversions accept.
  if (!mesh.empty()) o.mesh = parse_mesh_shape(mesh);
  o.shape = Shape(dims(shape));
  o.dtype = parse_data_type(dtype);
  return o;
}

// The per-device op: a smooth elementwise function, computed on whatever the rank holds.
float demo_op(float x) { return x * std::tanh(x) + 0.5f * x; }

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime& rt, int argc, char** argv) {
    DemoOptions o = parse_options(argc, argv);
    if (o.mesh.rows == 0) o.mesh = {1, rt.world_size()};
    auto mesh = MeshDevice::open(o.mesh);
    const bool root = mesh->device_id() == 0;
    if (root) std::printf("%s\n", visualize_mesh_device(*mesh).c_str());

    // SPMD: every rank builds the same host tensor and keeps its own shard.
    std::vector<float> values(static_cast<size_t>(o.shape.volume()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.001f * static_cast<float>(i)) * 3.0f;
    const Tensor host = Tensor::from_float(values, o.shape, o.dtype, Layout::TILE);
    const MeshTensor input = distribute_tensor(host, ShardTensorToMesh(o.dim), mesh);
    if (root) std::printf("%s\n", input.describe().c_str());

    std::vector<float> local = input.local().to_float();
    for (float& x : local) x = demo_op(x);
    const MeshTensor output(mesh, input.shape(), input.placements(),
                            Tensor::from_float(local, input.shard_shape(), o.dtype, Layout::TILE));

    const Tensor gathered = aggregate_tensor(output, ConcatMeshToTensor(o.dim));
    std::vector<float> expected = host.to_float();
    for (float& x : expected) x = demo_op(x);
    const double score = pcc(expected, gathered.to_float());
    if (root)
      std::printf("gathered %s %s on %d devices: PCC vs single-device result = %.6f (%s)\n",
                  gathered.shape().to_string().c_str(), std::string(to_string(o.dtype)).c_str(), mesh->num_devices(),
                  score, score >= 0.999 ? "PASS" : "FAIL");
    return score >= 0.999 ? 0 : 1;
  });
}
