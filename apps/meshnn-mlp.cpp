// meshnn-mlp: the Falcon-7B MLP inference job on a mesh (dp, tp, 2d or hybrid).
//
//   mpirun -np 2 build/apps/meshnn-mlp                       # generated Falcon-7B MLP, 1x2 tp, --check
//   mpirun -np 8 build/apps/meshnn-mlp --mesh 2x4 --mode 2d --weights falcon.h5 --input in.h5 --output out.h5
#include "meshnn/models/falcon/mlp_job.hpp"
#include "meshnn/runtime/cli.hpp"

using namespace meshnn;

namespace {

models::falcon::MlpJobConfig parse(int argc, char** argv, int world_size) {
  models::falcon::MlpJobConfig c;
  std::string mesh, mode = "tp", tp_variant = "planned", weight_dtype = "bfloat16", act_dtype = "bfloat16";
  std::string topology = "ring";
  CLI::App cli("Falcon MLP (dense_h_to_4h -> GELU -> dense_4h_to_h) inference on a mesh of MPI ranks.", "meshnn-mlp");
  cli.add_option("--mesh", mesh, "mesh shape; rows*cols must equal the number of ranks (default: 1 x ranks)")
      ->type_name("RxC")
      ->check(parsed_by(parse_mesh_shape));
  cli.add_option("--mode", mode, "how the model spreads over the mesh")->check(CLI::IsMember({"dp", "tp", "2d", "hybrid"}));
  cli.add_option("--tp-variant", tp_variant,
                 "how tp ends: planned (FF2 by distributed::matmul, its moves chosen by the cost model), or one of "
                 "the TT-NN tutorial's three, hand-placed")
      ->check(CLI::IsMember({"reduce_scatter", "all_reduce", "all_gather", "planned"}));
  cli.add_option("--calibration", c.calibration,
                 "cost model for --tp-variant planned (meshnn-calibrate's FILE.cost.json; default: the built-in one)")
      ->type_name("FILE");
  cli.add_option("--weights", c.weights, "weights file (default: generate a synthetic model of --hidden x --intermediate)")
      ->type_name("FILE");
  cli.add_option("--layer", c.layer, "read transformer.h.I.mlp.* of a whole checkpoint (-1: a bare MLP block)")
      ->transform(IntRange(-1, 100000));
  cli.add_option("--hidden", c.hidden, "hidden size of a generated model")->transform(IntRange(1, 1 << 20));
  cli.add_option("--intermediate", c.intermediate, "intermediate size of a generated model")->transform(IntRange(1, 1 << 22));
  cli.add_option("--input", c.input, "activations file with dataset 'input' [batch, seq, hidden] (default: generated)")
      ->type_name("FILE");
  cli.add_option("--output", c.output, "write the output (dataset 'output') and the run's settings here")->type_name("FILE");
  cli.add_option("--json", c.json, "write one JSON record with the run's figures (for scripts/scaling.py)")
      ->type_name("FILE");
  cli.add_option("--weight-dtype", weight_dtype, "element type of the weights")
      ->check(CLI::IsMember({"bfloat16", "bfloat8_b", "bfloat4_b", "float32"}));
  cli.add_option("--act-dtype", act_dtype, "element type of the activations")->check(CLI::IsMember({"bfloat16", "float32"}));
  cli.add_option("--batch", c.batch, "batch of a generated input")->transform(IntRange(1, 1 << 20));
  cli.add_option("--seq", c.seq, "sequence length of a generated input")->transform(IntRange(1, 1 << 20));
  cli.add_option("--seed", c.seed, "seed of generated weights and input")->transform(IntRange(0, INT64_MAX));
  cli.add_option("--topology", topology, "ring | linear (collective schedule)")->check(parsed_by(parse_topology));
  cli.add_option("--num-links", c.mlp.num_links, "channels each collective is striped over")->transform(IntRange(1, 16));
  cli.add_option("--warmup", c.warmup, "untimed forward passes")->transform(IntRange(0, 1000));
  cli.add_option("--iterations", c.iterations, "timed forward passes")->transform(IntRange(1, 100000));
  cli.add_flag("--check", c.check, "compare with the single-device result (PCC, max error)");
  parse_command_line(cli, argc, argv);

  // The checks above let through only what these conversions accept.
  c.mesh = mesh.empty() ? MeshShape{1, world_size} : parse_mesh_shape(mesh);
  c.mlp.mode = models::parse_parallel_mode(mode);
  c.mlp.tp_variant = models::falcon::parse_tp_variant(tp_variant);
  c.mlp.weight_dtype = parse_data_type(weight_dtype);
  c.mlp.act_dtype = parse_data_type(act_dtype);
  c.mlp.topology = parse_topology(topology);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime& rt, int argc, char** argv) {
    return models::falcon::run_mlp_job(parse(argc, argv, rt.world_size()));
  });
}
