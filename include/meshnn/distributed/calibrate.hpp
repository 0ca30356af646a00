// Calibrating the distributed matmul's cost model on the machine it runs on: alpha and beta per
// mesh axis, in up to three size ranges, fitted to timed all_gathers, and apart to timed
// all_reduces, over a sweep of sizes, the local matmul
// rate from timed products, the local copy rate from timed slices. Saved as JSON so that a run
// can reuse it; CostModel{} holds the defaults used without one.
#pragma once

#include <string>
#include <vector>

#include "meshnn/distributed/matmul.hpp"

namespace meshnn::distributed {

struct CalibrationOptions {
  std::vector<int64_t> gather_bytes = {1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 19,
                                       1 << 20, 1 << 21, 1 << 22, 1 << 23, 1 << 24};  // shard sizes
  int repeats = 5;  // per size (at least 25 for shards up to 256 KiB, whose times scatter more); the median counts
  // Local products [M, K] x [K, N], bfloat16 times bfloat8_b as the jobs' prefill, timed for the
  // product cost (CostModel::product_seconds, fit_product_cost). They vary K, M and N apart (a
  // 128-row prefill block of a TinyLlama projection, square blocks, K = 512, M = 1024) so that
  // the cost per output, per value of A and per value of B can be told from the FLOPs. The last
  // also serves the overlap measurement (A split on its rows).
  struct Product {
    int64_t m, k, n;
  };
  std::vector<Product> products = {{128, 2048, 2816}, {512, 1024, 1024}, {1024, 512, 1024},
                                   {1024, 1024, 512}, {512, 512, 1024},  {256, 2048, 2048}};
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
  double product_s = 0;  // the whole product at the calibrated rate
};

// A timed local product, and the CostModel product terms fitted to several: least squares on the
// relative error, terms that would come out negative left at 0 (with fewer products than terms,
// the FLOP rate alone: their FLOPs over their times together).
struct ProductSample {
  int64_t m, k, n;
  double seconds;
};
struct ProductFit {
  double flops_per_s = 0, s_per_output = 0, s_per_a = 0, s_per_b = 0;
  double max_relative_error = 0;  // of the fit over the samples
};
ProductFit fit_product_cost(const std::vector<ProductSample>& samples);

struct Calibration {
  CostModel model;
  AxisFit axis[2], reduce_axis[2];
  ProductFit product;
  OverlapFit overlap;
  std::string describe() const;  // a few lines for people
};

// Collective over the mesh: every rank gets the same calibration (rank 0's measurements).
Calibration calibrate(const MeshDevicePtr& mesh, const CalibrationOptions& options = {});

void save_cost_model(const CostModel& model, const std::string& path);
// Throws meshnn::Error naming the file and the field for a missing file, bad JSON or bad values.
CostModel load_cost_model(const std::string& path);

}  // namespace meshnn::distributed
