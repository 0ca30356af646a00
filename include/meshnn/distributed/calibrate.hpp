// Calibrating the distributed matmul's cost model on the machine it runs on: alpha and beta per
// mesh axis, in up to three size ranges, fitted to timed all_gathers, and apart to timed
// all_reduces, over a sweep of sizes, the local matmul
// rate from a timed product, the local copy rate from timed slices. Saved as JSON so that a run
// can reuse it; CostModel{} holds the defaults used without one.
#pragma once

#include <string>
#include <vector>

#include "meshnn/distributed/matmul.hpp"

namespace meshnn::distributed {

struct CalibrationOptions {
  std::vector<int64_t> gather_bytes = {1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 19,
                                       1 << 20, 1 << 21, 1 << 22, 1 << 23, 1 << 24};  // shard sizes
  int repeats = 5;            // per size; the median counts
  Shape matmul_a{256, 2048};  // the local product timed for the FLOP rate: a [M, K]
  int64_t matmul_n = 2048;    // ... times b [K, N] in bfloat8_b, as the jobs' weights
};

struct AxisFit {
  LinkCost link;
  double max_relative_error = 0;  // of the fit over the sweep
  int members = 1;                // devices along the axis (1: not measured, defaults kept)
};

// CostModel::overlap_efficiency as measured: all_gather_matmul of A split on rows, fused and
// unfused, against the overlap the fitted links and rate allow ((n-1) min(chunk transfer, chunk
// product)).
struct OverlapFit {
  int axis = -1;  // -1: not measured (no axis of two or more devices)
  double fused_s = 0, unfused_s = 0, possible_s = 0;
};

struct Calibration {
  CostModel model;
  AxisFit axis[2], reduce_axis[2];
  OverlapFit overlap;
  std::string describe() const;  // a few lines for people
};

// Collective over the mesh: every rank gets the same calibration (rank 0's measurements).
Calibration calibrate(const MeshDevicePtr& mesh, const CalibrationOptions& options = {});

void save_cost_model(const CostModel& model, const std::string& path);
// Throws meshnn::Error naming the file and the field for a missing file, bad JSON or bad values.
CostModel load_cost_model(const std::string& path);

}  // namespace meshnn::distributed
