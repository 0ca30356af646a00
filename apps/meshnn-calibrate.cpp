// meshnn-calibrate: what the links of this machine (or cluster) cost, per mesh axis. For each axis,
// the one-way time of point-to-point messages from 8 B to 64 MiB (ping-pong over meshnn's own
// transport) fitted by a piecewise alpha-beta model, with every size's error against the fit and
// against a second sweep the fit did not see; then
// (unless --no-collectives) the distributed matmul's cost model from ring sweeps of all_gather and
// all_reduce along each axis, the local product rate and the copy rate. Run it once per transport
// (e.g. with OMPI_MCA_btl=tcp,self for the network path) and keep the JSON.
//
//   mpirun -np 2 build/apps/meshnn-calibrate [--mesh 1x2] [--output link.json] [--transport shm]
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshnn/distributed/calibrate.hpp"
#include "meshnn/distributed/link_calibration.hpp"
#include "meshnn/runtime/cli.hpp"

using namespace meshnn;
using namespace meshnn::distributed;

namespace {

// What the run's transport is called, when the user did not say: Open MPI's btl selection if
// given, else "default" (shared memory within a node, the network between nodes).
std::string transport_label() {
  const char* btl = std::getenv("OMPI_MCA_btl");
  return btl != nullptr ? fmt::format("btl {}", btl) : "default";
}

nlohmann::ordered_json to_json(const PointToPointCalibration& c) {
  nlohmann::ordered_json segments = nlohmann::ordered_json::array(), samples = nlohmann::ordered_json::array();
  for (const LinkSegment& s : c.link.segments)
    segments.push_back({{"from_bytes", s.from_bytes}, {"alpha_s", s.alpha_s}, {"beta_s_per_byte", s.beta_s_per_byte}});
  for (size_t i = 0; i < c.samples.size(); ++i) {
    const LinkSample& s = c.samples[i];
    samples.push_back({{"bytes", s.bytes}, {"measured_s", s.measured_s}, {"predicted_s", s.predicted_s}});
    if (i < c.check.size()) samples.back()["measured_again_s"] = c.check[i].measured_s;
  }
  nlohmann::ordered_json out = {{"axis", c.axis},         {"members", c.members},
                                {"transport", c.transport}, {"segments", segments},
                                {"max_relative_error", c.max_relative_error}};
  if (!c.check.empty()) out["check_relative_error"] = c.check_relative_error;
  out["samples"] = samples;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime& rt, int argc, char** argv) {
    std::string mesh_text, output, transport = transport_label();
    bool no_collectives = false;
    PointToPointOptions p2p;
    CLI::App cli("Point-to-point and collective costs per mesh axis, fitted and saved.", "meshnn-calibrate");
    cli.add_option("--mesh", mesh_text, "mesh shape (default: 1 x ranks)")->type_name("RxC")->check(parsed_by(parse_mesh_shape));
    cli.add_option("--output", output, "write the calibration as JSON")->type_name("FILE");
    cli.add_option("--transport", transport, "label for the transport this run uses (default: from OMPI_MCA_btl)");
    cli.add_option("--passes", p2p.passes, "passes per sweep; a size's time is their mean without the fastest and slowest")
        ->capture_default_str()->check(CLI::PositiveNumber);
    cli.add_option("--segments", p2p.max_segments, "ranges of the piecewise alpha-beta fit")
        ->capture_default_str()->check(CLI::Range(1, 8));
    cli.add_flag("--no-collectives", no_collectives, "only the point-to-point links");
    parse_command_line(cli, argc, argv);
    const MeshShape shape = mesh_text.empty() ? MeshShape{1, rt.world_size()} : parse_mesh_shape(mesh_text);
    auto mesh = MeshDevice::open(shape);
    const bool root = mesh->device_id() == 0;

    nlohmann::ordered_json record;
    record["mesh"] = shape.to_string();
    record["transport"] = transport;
    p2p.transport = transport;
    double worst = 0, worst_check = 0;
    for (int axis = 0; axis < 2; ++axis) {
      const PointToPointCalibration c = calibrate_point_to_point(mesh, axis, p2p);
      if (root) std::printf("%s", c.describe().c_str());
      if (c.members > 1) {
        worst = std::max(worst, c.max_relative_error);
        worst_check = std::max(worst_check, c.check_relative_error);
        record["point_to_point"].push_back(to_json(c));
      }
    }
    if (root && record.contains("point_to_point"))
      std::printf("point-to-point, 8 B to 64 MiB: the fit within %.1f%% of the sweep it was fitted to, within %.1f%% "
                  "of a second sweep (target <= 15%%)\n", 100 * worst, 100 * worst_check);
    if (!no_collectives) {
      const Calibration c = calibrate(mesh);
      if (root) std::printf("%s", c.describe().c_str());
      if (!output.empty()) {
        const std::string path = output + ".cost.json";
        if (root) save_cost_model(c.model, path);
        record["cost_model_file"] = path;
      }
    }
    if (root && !output.empty()) {
      std::ofstream out(output);
      out << record.dump(2) << '\n';
      MESHNN_CHECK(out.good(), "cannot write '{}'", output);
    }
    return 0;
  });
}
