// meshnn-dmm-bench: the distributed matmul's planner against the plans it rejected, on the machine
// it runs on. For each shape and placement case: the cost model is calibrated first (or loaded),
// then every candidate plan (the cheapest predicted --max-plans, and the planner's choice) is timed,
// and the table shows predicted against measured time. The summary states the two targets: the
// choice within 10% of the best plan measured, and predictions within 25% for plans moving >= 1 MiB.
// With --collective-matmuls: the fused all_gather_matmul and matmul_reduce_scatter against their
// unfused pairs (the collective, then the product), alternated, on the same shapes.
//
//   mpirun -np 2 build/apps/meshnn-dmm-bench [--shapes llama-mlp,square-1k] [--json out.json]
//   mpirun -np 2 build/apps/meshnn-dmm-bench --collective-matmuls [--shapes falcon-mlp]
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "meshnn/distributed/calibrate.hpp"
#include "meshnn/distributed/collective_matmul.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "meshnn/distributed/matmul.hpp"
#include "meshnn/io/json_output.hpp"
#include "meshnn/runtime/cli.hpp"

using namespace meshnn;
using namespace meshnn::distributed;

namespace {

struct ShapeCase {
  const char* name;
  int64_t m, k, n;
};
// Falcon-7B's and TinyLlama's MLP up-projections for a 128-token prefill, and square products.
constexpr ShapeCase kShapes[] = {{"falcon-mlp", 128, 4544, 18176}, {"llama-mlp", 128, 2048, 5632},
                                 {"square-1k", 1024, 1024, 1024},  {"square-2k", 2048, 2048, 2048}};

struct PlacementCase {
  const char* name;
  Placement a, b;
  std::optional<Placement> output;  // on the mesh's columns axis (1); the rows axis stays Replicate
};
// The layouts a model meets: column-parallel, row-parallel with its reduction, and operands split
// the wrong way for each other, which the planner must repair.
const PlacementCase kCases[] = {
    {"column-parallel", Replicate{}, Shard{1}, std::nullopt},
    {"row-parallel -> replicated", Shard{1}, Shard{0}, Replicate{}},
    {"rows x columns -> replicated", Shard{0}, Shard{1}, Replicate{}},
    {"rows x contraction -> rows", Shard{0}, Shard{0}, Shard{0}},
};

struct Options {
  int iterations = 5, max_plans = 6;
  bool collective_matmuls = false, breakdown = false;
  std::string calibration, save_calibration, json;
};

// One run of fn, started together on every rank, until the slowest rank is done.
double timed_once(const MeshDevice& mesh, const std::function<void()>& fn) {
  mesh.synchronize();
  const auto start = std::chrono::steady_clock::now();
  fn();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, mesh.comm());
  return s;
}

double timed_median(const MeshDevice& mesh, int iterations, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < iterations; ++i) t.push_back(timed_once(mesh, fn));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Each part of a plan's run timed on its own (median of o.iterations) beside its prediction: which
// of the cost model's terms is off when a whole plan's prediction is.
nlohmann::ordered_json time_parts(const MeshTensor& a, const MeshTensor& b, const MatmulPlan& plan,
                                  DistributedMatmulOptions options, const CostModel& model, const Options& o,
                                  const MeshDevice& mesh, bool root) {
  if (plan.fused != FusedCollective::NONE) {
    if (root) std::printf("      (fused: the collective and the product run as one)\n");
    return nlohmann::ordered_json::array();
  }
  options.output_dtype = options.output_dtype.value_or(a.dtype());
  MeshTensor moved_a, moved_b, scratch;
  const MeshTensor& xa = plan_operand(a, plan.a, moved_a);
  const MeshTensor& xb = plan_operand(b, plan.b, moved_b);
  const MeshTensor product = plan_product(xa, xb, plan, options);
  const double move_a = model.seconds(plan.a), move_b = model.seconds(plan.b), output = model.seconds(plan.output);
  struct Part {
    const char* name;
    double predicted_s;
    std::function<void()> run;
  };
  const Part parts[] = {
      {"move A", move_a, [&] { plan_operand(a, plan.a, scratch); }},
      {"move B", move_b, [&] { plan_operand(b, plan.b, scratch); }},
      {"product", plan.predicted_s() - move_a - move_b - output, [&] { plan_product(xa, xb, plan, options); }},
      {"output", output, [&] { plan_output(product, plan, options); }},
  };
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Part& part : parts) {
    const double s = timed_median(mesh, o.iterations, part.run);
    if (root)
      std::printf("      %-8s predicted %8.3f ms  measured %8.3f ms (%+.0f%%)\n", part.name, 1e3 * part.predicted_s, 1e3 * s,
                  100 * (part.predicted_s - s) / s);
    out.push_back({{"part", part.name}, {"predicted_s", part.predicted_s}, {"measured_s", io::round_to(s, 6)}});
  }
  return out;
}

CostModel cost_model(const Options& o, const MeshDevicePtr& mesh, bool root) {
  if (!o.calibration.empty()) return load_cost_model(o.calibration);
  const Calibration c = calibrate(mesh);
  if (root) std::printf("%s", c.describe().c_str());
  if (!o.save_calibration.empty() && root) save_cost_model(c.model, o.save_calibration);
  return c.model;
}

// Times the candidate plans of one case; prints the table and returns the case's JSON record.
nlohmann::ordered_json run_case(const ShapeCase& shape, const PlacementCase& pc, const CostModel& model,
                                const Options& o, const MeshDevicePtr& mesh, bool root) {
  const Shape sa{shape.m, shape.k}, sb{shape.k, shape.n};
  const Tensor ha = Tensor::from_float(std::vector<float>(static_cast<size_t>(sa.volume()), 0.5f), sa,
                                       DataType::BFLOAT16, Layout::TILE);
  const Tensor hb = Tensor::from_float(std::vector<float>(static_cast<size_t>(sb.volume()), 0.25f), sb,
                                       DataType::BFLOAT8_B, Layout::TILE);
  const MeshTensor a = distribute_tensor(ha, MeshMapperConfig{{Replicate{}, pc.a}}, mesh);
  const MeshTensor b = distribute_tensor(hb, MeshMapperConfig{{Replicate{}, pc.b}}, mesh);
  DistributedMatmulOptions options;
  options.cost = model;
  if (pc.output) options.output_placements = Placements{Replicate{}, *pc.output};
  std::vector<MatmulPlan> plans = matmul_plans(sa, a.dtype(), a.layout(), a.placements(), sb, b.dtype(), b.layout(),
                                               b.placements(), mesh->shape(), options);
  const MatmulPlan chosen = plan_matmul(sa, a.dtype(), a.layout(), a.placements(), sb, b.dtype(), b.layout(),
                                        b.placements(), mesh->shape(), options);
  if (plans.size() > static_cast<size_t>(o.max_plans)) plans.resize(static_cast<size_t>(o.max_plans));
  if (std::none_of(plans.begin(), plans.end(), [&](const MatmulPlan& p) { return p.summary() == chosen.summary(); }))
    plans.push_back(chosen);

  if (root) std::printf("\n%s %lldx%lldx%lld, %s:\n", shape.name, static_cast<long long>(shape.m),
                        static_cast<long long>(shape.k), static_cast<long long>(shape.n), pc.name);
  double best = INFINITY, chosen_s = 0, worst_error = 0;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const MatmulPlan& plan : plans) {
    const double s = timed_median(*mesh, o.iterations, [&] { matmul(a, b, plan, options); });
    const bool is_chosen = plan.summary() == chosen.summary();
    const double error = (plan.predicted_s() - s) / s;
    best = std::min(best, s);
    if (is_chosen) chosen_s = s;
    if (plan.bytes_received() >= (1 << 20)) worst_error = std::max(worst_error, std::abs(error));
    if (root)
      std::printf("  %s %-90s moves %8.2f MiB  predicted %8.3f ms  measured %8.3f ms (%+.0f%%)\n", is_chosen ? "*" : " ",
                  plan.summary().c_str(), plan.bytes_received() / (1 << 20), 1e3 * plan.predicted_s(), 1e3 * s,
                  100 * error);
    rows.push_back({{"plan", plan.summary()}, {"chosen", is_chosen}, {"bytes_received", plan.bytes_received()},
                    {"predicted_s", plan.predicted_s()}, {"measured_s", io::round_to(s, 6)}});
    if (o.breakdown) rows.back()["parts"] = time_parts(a, b, plan, options, model, o, *mesh, root);
  }
  if (root)
    std::printf("  chosen / best measured: %.2f (target <= 1.10); worst prediction error of plans moving >= 1 MiB: "
                "%.0f%% (target <= 25%%)\n",
                chosen_s / best, 100 * worst_error);
  return {{"shape", shape.name}, {"m", shape.m}, {"k", shape.k}, {"n", shape.n}, {"case", pc.name},
          {"ranks", mesh->num_devices()}, {"chosen_over_best", io::round_to(chosen_s / best, 4)},
          {"worst_prediction_error_1mib", io::round_to(worst_error, 4)}, {"plans", rows}};
}

// The collective matmuls on one shape, fused against unfused, alternated round by round (each
// round's figure the slowest rank's): all_gather_matmul with A split on K (TT-NN's use) or on rows
// (sequence parallelism) into a column-parallel B; matmul_reduce_scatter with both split on K,
// scattered onto A's rows.
nlohmann::ordered_json run_collective_matmuls(const ShapeCase& shape, const Options& o, const MeshDevicePtr& mesh,
                                              bool root) {
  const Shape sa{shape.m, shape.k}, sb{shape.k, shape.n};
  const Tensor ha = Tensor::from_float(std::vector<float>(static_cast<size_t>(sa.volume()), 0.5f), sa,
                                       DataType::BFLOAT16, Layout::TILE);
  const Tensor hb = Tensor::from_float(std::vector<float>(static_cast<size_t>(sb.volume()), 0.25f), sb,
                                       DataType::BFLOAT8_B, Layout::TILE);
  const MeshTensor a_rows = distribute_tensor(ha, MeshMapperConfig{{Replicate{}, Shard{0}}}, mesh);
  const MeshTensor a_k = distribute_tensor(ha, MeshMapperConfig{{Replicate{}, Shard{1}}}, mesh);
  const MeshTensor b_columns = distribute_tensor(hb, MeshMapperConfig{{Replicate{}, Shard{1}}}, mesh);
  const MeshTensor b_k = distribute_tensor(hb, MeshMapperConfig{{Replicate{}, Shard{0}}}, mesh);
  CollectiveMatmulOptions fused, unfused;
  unfused.fused = false;
  struct Op {
    const char* name;
    std::function<void(const CollectiveMatmulOptions&)> run;
  };
  const Op ops[] = {
      {"all_gather_matmul (K)", [&](const CollectiveMatmulOptions& opt) { all_gather_matmul(a_k, b_columns, 1, 1, opt); }},
      {"all_gather_matmul (rows)",
       [&](const CollectiveMatmulOptions& opt) { all_gather_matmul(a_rows, b_columns, 0, 1, opt); }},
      {"matmul_reduce_scatter (rows)",
       [&](const CollectiveMatmulOptions& opt) { matmul_reduce_scatter(a_k, b_k, 0, 1, opt); }},
  };
  if (root) std::printf("\n%s %lldx%lldx%lld, collective matmuls (ms, median of %d alternations):\n", shape.name,
                        static_cast<long long>(shape.m), static_cast<long long>(shape.k), static_cast<long long>(shape.n),
                        o.iterations);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const Op& op : ops) {
    std::vector<double> f, u;
    op.run(fused);
    op.run(unfused);
    for (int i = 0; i < o.iterations; ++i) {
      f.push_back(timed_once(*mesh, [&] { op.run(fused); }));
      u.push_back(timed_once(*mesh, [&] { op.run(unfused); }));
    }
    std::sort(f.begin(), f.end());
    std::sort(u.begin(), u.end());
    const double fs = f[f.size() / 2], us = u[u.size() / 2];
    if (root)
      std::printf("  %-30s fused %8.3f  unfused %8.3f  unfused / fused %.2f\n", op.name, 1e3 * fs, 1e3 * us, us / fs);
    rows.push_back({{"op", op.name}, {"fused_s", io::round_to(fs, 6)}, {"unfused_s", io::round_to(us, 6)}});
  }
  return {{"shape", shape.name}, {"m", shape.m}, {"k", shape.k}, {"n", shape.n}, {"ranks", mesh->num_devices()},
          {"collective_matmuls", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime& rt, int argc, char** argv) {
    Options o;
    std::string shapes = "llama-mlp,square-1k,square-2k";
    CLI::App cli("The distributed matmul's planner against the plans it rejected, with a calibrated cost model.",
                 "meshnn-dmm-bench");
    cli.add_option("--shapes", shapes, "comma-separated: falcon-mlp, llama-mlp, square-1k, square-2k");
    cli.add_option("--iterations", o.iterations, "timed runs per plan (the median counts)")->transform(IntRange(1, 1000));
    cli.add_option("--max-plans", o.max_plans, "plans timed per case, cheapest predicted first (plus the choice)")
        ->transform(IntRange(1, 1000));
    cli.add_option("--calibration", o.calibration, "cost model to load instead of calibrating")->type_name("FILE");
    cli.add_option("--save-calibration", o.save_calibration, "write the calibrated cost model here")->type_name("FILE");
    cli.add_option("--json", o.json, "write one JSON record per case")->type_name("FILE");
    cli.add_flag("--breakdown", o.breakdown,
                 "also time each plan's parts (operand moves, product, output move) against their predictions");
    cli.add_flag("--collective-matmuls", o.collective_matmuls,
                 "time the fused all_gather_matmul and matmul_reduce_scatter against their unfused pairs instead");
    parse_command_line(cli, argc, argv);

    std::vector<const ShapeCase*> chosen;
    for (size_t begin = 0; begin <= shapes.size();) {
      const size_t end = std::min(shapes.find(',', begin), shapes.size());
      const std::string name = shapes.substr(begin, end - begin);
      begin = end + 1;
      const auto* shape = std::find_if(std::begin(kShapes), std::end(kShapes), [&](const ShapeCase& s) { return name == s.name; });
      if (shape == std::end(kShapes)) throw UsageError(fmt::format("--shapes: unknown shape '{}'", name));
      chosen.push_back(shape);
    }

    auto mesh = MeshDevice::open({1, rt.world_size()});
    const bool root = mesh->device_id() == 0;
    std::vector<std::string> records;
    if (o.collective_matmuls) {
      for (const ShapeCase* shape : chosen) records.push_back(run_collective_matmuls(*shape, o, mesh, root).dump());
      if (root && !o.json.empty()) io::write_text_file(o.json, io::json_array_lines(records));
      return 0;
    }
    const CostModel model = cost_model(o, mesh, root);
    for (const ShapeCase* shape : chosen)
      for (const PlacementCase& pc : kCases) records.push_back(run_case(*shape, pc, model, o, mesh, root).dump());
    if (root && !o.json.empty()) io::write_text_file(o.json, io::json_array_lines(records));
    return 0;
  });
}
