#include "meshnn/models/falcon/mlp_job.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/distributed/calibrate.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/io/json_output.hpp"
#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/models/every_rank.hpp"
#include "meshnn/models/report.hpp"
#include "meshnn/models/falcon/synthetic.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/runtime/memory.hpp"
#include "meshnn/runtime/runtime.hpp"
#include "meshnn/distributed/distribute.hpp"

namespace meshnn::models::falcon {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Device 0 writes the synthetic model into a private temporary directory; everyone agrees on the
// outcome. The file is removed when the job ends.
struct GeneratedWeights {
  std::string dir, file;
  MeshDevicePtr mesh;
  GeneratedWeights(const MlpJobConfig& c, MeshDevicePtr mesh_) : mesh(std::move(mesh_)) {
    int pid = static_cast<int>(getpid());
    MESHNN_MPI_CHECK(MPI_Bcast(&pid, 1, MPI_INT, 0, mesh->comm()));
    const char* tmp = std::getenv("TMPDIR");
    dir = fmt::format("{}/meshnn-mlp-{}", tmp != nullptr && *tmp ? tmp : "/tmp", pid);
    file = dir + "/falcon_mlp.h5";
    on_root(*mesh, "generating the synthetic model", [&] {
      std::filesystem::create_directories(dir);
      SyntheticFalconMlp spec;
      spec.hidden_size = c.hidden;
      spec.intermediate_size = c.intermediate;
      spec.seed = c.seed;
      spec.storage = io::StoredType::BFLOAT16;
      write_synthetic_mlp(file, spec);
    });
  }
  ~GeneratedWeights() {
    MPI_Barrier(mesh->comm());  // nobody is still reading
    std::error_code ignored;  // best effort: a leftover temporary directory is not worth failing for
    if (mesh->device_id() == 0) std::filesystem::remove_all(dir, ignored);
  }
};

// Single-device reference on the root: full weights and input loaded on a 1x1 mesh of its own.
struct CheckResult {
  double pcc = 0, max_abs_error = 0, max_abs_reference = 0;
};
CheckResult single_device_check(const MlpJobConfig& c, const std::string& weights, const Tensor& x_host,
                                const Tensor& y) {
  auto self = MeshDevice::open({1, 1}, Topology::RING, MPI_COMM_SELF);
  io::LoadOptions lo{c.mlp.weight_dtype, Layout::TILE, true};
  const MeshTensor w1 = io::load_tensor(weights, mlp_key(c.layer, "dense_h_to_4h.weight"), ReplicateTensorToMesh(), self, lo);
  const MeshTensor w2 = io::load_tensor(weights, mlp_key(c.layer, "dense_4h_to_h.weight"), ReplicateTensorToMesh(), self, lo);
  const Tensor reference = falcon_mlp_reference(x_host, w1.local(), w2.local(), c.mlp.act_dtype);
  const std::vector<float> a = reference.to_float(), b = y.to_float();
  CheckResult r;
  r.pcc = pcc(a, b);
  for (size_t i = 0; i < a.size(); ++i) {
    r.max_abs_error = std::max(r.max_abs_error, std::abs(double(a[i]) - b[i]));
    r.max_abs_reference = std::max(r.max_abs_reference, std::abs(double(a[i])));
  }
  return r;
}

MeshDevicePtr open_mesh(const MlpJobConfig& c) {
  auto mesh = MeshDevice::open(c.mesh, c.mlp.topology);
  MESHNN_CHECK(c.iterations >= 1 && c.warmup >= 0, "iterations must be >= 1 and warmup >= 0");
  if (mesh->device_id() == 0) std::printf("%s\n", visualize_mesh_device(*mesh).c_str());
  return mesh;
}

// The model and its input on the mesh, and what loading them cost this rank.
struct Loaded {
  FalconMlp mlp;
  MeshTensor x;
  Tensor x_host;  // the whole input when it was generated, kept for --check
  double seconds = 0, growth_bytes = 0;
};

// Each rank reads only its shards; memory growth is measured around it.
Loaded load_model_and_input(const MlpJobConfig& c, const std::string& weights, const MeshDevicePtr& mesh) {
  const size_t rss_before = current_rss_bytes();
  const auto start = std::chrono::steady_clock::now();
  Loaded loaded{FalconMlp::load(weights, c.layer, mesh, c.mlp)};
  const FalconMlp& mlp = loaded.mlp;
  if (c.input.empty()) {
    const std::vector<float> values =
        io::synthetic_values(c.seed, io::kInputTensorId, c.batch * c.seq * mlp.hidden_size(), 1.0);
    loaded.x_host = Tensor::from_float(values, Shape{c.batch, c.seq, mlp.hidden_size()}, c.mlp.act_dtype, Layout::TILE);
    loaded.x = distribute_tensor(loaded.x_host, mlp.input_mapper(), mesh);
  } else {
    io::LoadOptions lo{c.mlp.act_dtype, Layout::TILE, false};
    loaded.x = io::load_tensor(c.input, "input", mlp.input_mapper(), mesh, lo);
  }
  loaded.seconds = seconds_since(start);
  loaded.growth_bytes = static_cast<double>(peak_rss_bytes() - std::min(peak_rss_bytes(), rss_before));
  return loaded;
}

struct Passes {
  MeshTensor y;                 // the last pass's output
  PhaseTimes times;             // summed over the timed passes
  std::vector<double> seconds;  // each timed pass on this rank
  double total_seconds = 0;     // all timed passes on this rank
};

// Warm-up passes first, then the timed ones.
Passes run_passes(const MlpJobConfig& c, const Loaded& loaded, MeshDevice& mesh) {
  Passes p;
  for (int i = 0; i < c.warmup; ++i) {
    PhaseTimes ignored;
    p.y = loaded.mlp.forward(loaded.x, ignored);
  }
  mesh.synchronize();
  p.seconds.resize(static_cast<size_t>(c.iterations));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < c.iterations; ++i) {
    const auto pass_start = std::chrono::steady_clock::now();
    p.y = loaded.mlp.forward(loaded.x, p.times);
    p.seconds[i] = seconds_since(pass_start);
  }
  p.total_seconds = seconds_since(start);
  return p;
}

constexpr double kMiB = 1 << 20;

// The job's figures, the same on every rank. Seconds, each on the slowest rank.
struct Figures {
  RankTable table;
  double total = 0, compute = 0, communication = 0;  // over all timed passes
  double per_pass = 0;                               // the mean pass
  double best_pass = 0;
  int64_t tokens = 0;  // per pass
};

Figures gather_figures(const MlpJobConfig& c, const Loaded& loaded, const Passes& passes, const MeshDevice& mesh) {
  const double per_iteration = 1e3 / c.iterations;
  Figures f;
  f.table = gather_rank_table({{"load s", loaded.seconds},
                               {"compute ms", per_iteration * passes.times.compute},
                               {"comm ms", per_iteration * passes.times.communication},
                               {"total ms", per_iteration * passes.total_seconds},
                               {"weights MiB", static_cast<double>(loaded.mlp.weight_bytes()) / kMiB},
                               {"load grow MiB", loaded.growth_bytes / kMiB},
                               {"peak MiB", static_cast<double>(peak_rss_bytes()) / kMiB}},
                              mesh.comm());
  f.total = f.table.max("total ms") * c.iterations / 1e3;
  f.compute = f.table.max("compute ms") * c.iterations / 1e3;
  f.communication = f.table.max("comm ms") * c.iterations / 1e3;
  // Best pass: each pass's time on its slowest rank, then the fastest such pass. On a shared
  // machine interference only ever slows a pass down, so the best pass is the stable figure for
  // scaling comparisons; the mean is reported beside it.
  std::vector<double> pass_seconds = passes.seconds;
  MESHNN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, pass_seconds.data(), c.iterations, MPI_DOUBLE, MPI_MAX, mesh.comm()));
  f.best_pass = *std::min_element(pass_seconds.begin(), pass_seconds.end());
  f.tokens = loaded.x.shape()[0] * loaded.x.shape()[-2];
  f.per_pass = f.total / c.iterations;
  return f;
}
void print_report(const MeshTensor& y, const Figures& f) {
  std::printf("output %s placements %s\n", y.shape().to_string().c_str(), to_string(y.placements()).c_str());
  std::printf("%s(per forward pass)\n", f.table.format().c_str());
  std::printf("tokens %lld per pass: %.1f tokens/s, %.4f ms per token (mean pass, slowest rank); best pass %.4f ms "
              "per token\n",
              static_cast<long long>(f.tokens), f.tokens / f.per_pass, 1e3 * f.per_pass / f.tokens,
              1e3 * f.best_pass / f.tokens);
}

// The whole input, for --check on the root: the generated one, or the input file read again.
Tensor whole_input(const MlpJobConfig& c, const Tensor& generated) {
  if (generated.size_bytes() != 0) return generated;
  auto self = MeshDevice::open({1, 1}, Topology::RING, MPI_COMM_SELF);
  return io::load_tensor(c.input, "input", ReplicateTensorToMesh(), self, {c.mlp.act_dtype, Layout::TILE, false}).local();
}

// Prints the comparison; returns the exit status (1: the output is not close enough).
int print_check(const MlpJobConfig& c, const CheckResult& check) {
  const double threshold = is_block_float(c.mlp.weight_dtype) || c.mlp.act_dtype == DataType::BFLOAT16 ? 0.999 : 0.9999;
  const int status = check.pcc >= threshold ? 0 : 1;
  std::printf("check vs single-device result: PCC %.6f (need >= %g), max abs error %.3g (max |ref| %.3g): %s\n",
              check.pcc, threshold, check.max_abs_error, check.max_abs_reference, status == 0 ? "PASS" : "FAIL");
  return status;
}

void write_output(const MlpJobConfig& c, const std::string& weights, const Tensor& y_host, const Figures& f) {
  io::write_file(c.output, {{"output", &y_host}},
                 {{"mesh", c.mesh.to_string()},
                  {"mode", std::string(to_string(c.mlp.mode))},
                  {"tp_variant", std::string(to_string(c.mlp.tp_variant))},
                  {"weight_dtype", std::string(to_string(c.mlp.weight_dtype))},
                  {"act_dtype", std::string(to_string(c.mlp.act_dtype))},
                  {"weights", weights},
                  {"seed", static_cast<int64_t>(c.seed)},
                  {"iterations", static_cast<int64_t>(c.iterations)},
                  {"time_per_pass_s", f.per_pass},
                  {"compute_s", f.compute / c.iterations},
                  {"communication_s", f.communication / c.iterations}});
  std::printf("wrote %s\n", c.output.c_str());
}

// pcc: -1 without --check.
void write_json_record(const MlpJobConfig& c, const MeshDevice& mesh, const FalconMlp& mlp, const Figures& f, double pcc) {
  // Times in ms to 6 places, load time in s to 4, PCC to 8: no more digits than the figures carry.
  const nlohmann::ordered_json record = {
      {"ranks", mesh.num_devices()},
      {"mesh", c.mesh.to_string()},
      {"mode", to_string(c.mlp.mode)},
      {"tp_variant", to_string(c.mlp.tp_variant)},
      {"weight_dtype", to_string(c.mlp.weight_dtype)},
      {"act_dtype", to_string(c.mlp.act_dtype)},
      {"batch", c.batch},
      {"seq", c.seq},
      {"hidden", mlp.hidden_size()},
      {"intermediate", mlp.intermediate_size()},
      {"time_per_pass_ms", io::round_to(1e3 * f.per_pass, 6)},
      {"time_per_token_ms", io::round_to(1e3 * f.per_pass / f.tokens, 6)},
      {"best_time_per_token_ms", io::round_to(1e3 * f.best_pass / f.tokens, 6)},
      {"compute_ms", io::round_to(1e3 * f.compute / c.iterations, 6)},
      {"comm_ms", io::round_to(1e3 * f.communication / c.iterations, 6)},
      {"load_s", io::round_to(f.table.value(0, "load s"), 4)},
      {"pcc", io::round_to(pcc, 8)}};
  io::write_text_file(c.json, record.dump() + "\n");
}

// Composes the output on the root, then checks and writes it there; everyone agrees on the
// outcome and on the exit status.
int finish(const MlpJobConfig& c, const std::string& weights, const Loaded& loaded, const MeshTensor& y,
           const Figures& f, const MeshDevice& mesh) {
  const Tensor y_host = full_tensor(y, 0);
  int status = 0;
  on_root(mesh, "finishing the job", [&] {
    CheckResult check;
    if (c.check) {
      check = single_device_check(c, weights, whole_input(c, loaded.x_host), y_host);
      status = print_check(c, check);
    }
    if (!c.output.empty()) write_output(c, weights, y_host, f);
    if (!c.json.empty()) write_json_record(c, mesh, loaded.mlp, f, c.check ? check.pcc : -1.0);
  });
  MESHNN_MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT, 0, mesh.comm()));
  return status;
}

}  // namespace

int run_mlp_job(const MlpJobConfig& config) {
  const MeshDevicePtr mesh = open_mesh(config);
  const bool root = mesh->device_id() == 0;
  MlpJobConfig c = config;
  const bool planned = c.mlp.tp_variant == TpVariant::PLANNED &&
                       (c.mlp.mode == ParallelMode::TP || c.mlp.mode == ParallelMode::HYBRID);
  // Without a file the built-in cost model, as in the LLM job: calibrating at start would cost every
  // run (tests, scaling sweeps on oversubscribed ranks) seconds for a choice it does not change here.
  if (planned && !c.calibration.empty()) c.mlp.cost = distributed::load_cost_model(c.calibration);
  std::unique_ptr<GeneratedWeights> generated;
  if (c.weights.empty()) generated = std::make_unique<GeneratedWeights>(c, mesh);
  const std::string weights = generated ? generated->file : c.weights;

  const Loaded loaded = load_model_and_input(c, weights, mesh);
  if (root) std::printf("%s%s\n", loaded.mlp.describe().c_str(), loaded.x.describe().c_str());
  if (planned) {
    // Planned on every rank, printed by one: a shape no plan fits is then the same error everywhere,
    // before any rank enters a collective of the passes.
    const std::string plan = loaded.mlp.ff2_plan(loaded.x.shape()).explain();
    if (root) std::printf("FF2 %s\n", plan.c_str());
  }
  const Passes passes = run_passes(c, loaded, *mesh);
  const Figures figures = gather_figures(c, loaded, passes, *mesh);
  if (root) print_report(passes.y, figures);
  return finish(c, weights, loaded, passes.y, figures, *mesh);
}

}  // namespace meshnn::models::falcon
