// meshnn-mlp: the Falcon-7B MLP inference job on a mesh (dp, tp, 2d or hybrid).
//
//   mpirun -np 2 build/apps/meshnn-mlp                       # generated Falcon-7B MLP, 1x2 tp, --check
//   mpirun -np 8 build/apps/meshnn-mlp --mesh 2x4 --mode 2d --weights falcon.h5 --input in.h5 --output out.h5
#include "meshnn/models/falcon/mlp_job.hpp"
#include "meshnn/runtime/options.hpp"

using namespace meshnn;

namespace {

models::falcon::MlpJobConfig parse(int argc, char** argv, int world_size) {
  OptionParser cli("meshnn-mlp", "Falcon MLP (dense_h_to_4h -> GELU -> dense_4h_to_h) inference on a mesh of MPI ranks.");
  cli.add_option("mesh", "RxC", "mesh shape; rows*cols must equal the number of ranks (default: 1 x ranks)");
  cli.add_option("mode", "MODE", "dp | tp | 2d | hybrid", "tp");
  cli.add_option("tp-variant", "V", "how tp ends: reduce_scatter | all_reduce | all_gather (TT-NN tutorial)", "reduce_scatter");
  cli.add_option("weights", "FILE", "weights file (default: generate a synthetic model of --hidden x --intermediate)");
  cli.add_option("layer", "I", "read transformer.h.I.mlp.* of a whole checkpoint (default: a bare MLP block)", "-1");
  cli.add_option("hidden", "N", "hidden size of a generated model", "4544");
  cli.add_option("intermediate", "N", "intermediate size of a generated model", "18176");
  cli.add_option("input", "FILE", "activations file with dataset 'input' [batch, seq, hidden] (default: generated)");
  cli.add_option("output", "FILE", "write the output (dataset 'output') and the run's settings here");
  cli.add_option("json", "FILE", "write one JSON record with the run's figures (for scripts/scaling.py)");
  cli.add_option("weight-dtype", "T", "bfloat16 | bfloat8_b | bfloat4_b | float32", "bfloat16");
  cli.add_option("act-dtype", "T", "bfloat16 | float32", "bfloat16");
  cli.add_option("batch", "B", "batch of a generated input", "1");
  cli.add_option("seq", "S", "sequence length of a generated input", "128");
  cli.add_option("seed", "N", "seed of generated weights and input", "1234");
  cli.add_option("topology", "T", "ring | linear (collective schedule)", "ring");
  cli.add_option("num-links", "N", "channels each collective is striped over", "1");
  cli.add_option("warmup", "N", "untimed forward passes", "1");
  cli.add_option("iterations", "N", "timed forward passes", "3");
  cli.add_flag("check", "compare with the single-device result (PCC, max error)");
  cli.parse(argc, argv);

  models::falcon::MlpJobConfig c;
  try {
    c.mesh = cli.has("mesh") ? parse_mesh_shape(cli.get("mesh")) : MeshShape{1, world_size};
    c.mlp.mode = models::parse_parallel_mode(cli.get("mode"));
    c.mlp.tp_variant = models::falcon::parse_tp_variant(cli.get("tp-variant"));
    c.mlp.weight_dtype = parse_data_type(cli.get_choice("weight-dtype", {"bfloat16", "bfloat8_b", "bfloat4_b", "float32"}));
    c.mlp.act_dtype = parse_data_type(cli.get_choice("act-dtype", {"bfloat16", "float32"}));
    c.mlp.topology = parse_topology(cli.get("topology"));
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  c.mlp.num_links = static_cast<int>(cli.get_int("num-links", 1, 16));
  c.weights = cli.has("weights") ? cli.get("weights") : "";
  c.layer = static_cast<int>(cli.get_int("layer", -1, 100000));
  c.hidden = cli.get_int("hidden", 1, 1 << 20);
  c.intermediate = cli.get_int("intermediate", 1, 1 << 22);
  c.input = cli.has("input") ? cli.get("input") : "";
  c.output = cli.has("output") ? cli.get("output") : "";
  c.json = cli.has("json") ? cli.get("json") : "";
  c.batch = cli.get_int("batch", 1, 1 << 20);
  c.seq = cli.get_int("seq", 1, 1 << 20);
  c.seed = static_cast<uint64_t>(cli.get_int("seed", 0, INT64_MAX));
  c.warmup = static_cast<int>(cli.get_int("warmup", 0, 1000));
  c.iterations = static_cast<int>(cli.get_int("iterations", 1, 100000));
  c.check = cli.flag("check");
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime& rt, int argc, char** argv) {
    return models::falcon::run_mlp_job(parse(argc, argv, rt.world_size()));
  });
}
