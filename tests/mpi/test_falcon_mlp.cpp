// The Falcon MLP in every parallel mode and mesh shape agrees with the single-device result and a
// float64 reference (small sizes: hidden 256, intermediate 1024).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/models/falcon/synthetic.hpp"
#include "meshnn/models/falcon/mlp.hpp"
#include "meshnn/ops/pcc.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::models::falcon {
namespace {

using testing::all_ranks_ok;
using testing::world_rank;
using testing::world_size;

constexpr int64_t kHidden = 256, kInter = 1024;

std::string weights_file() {
  static std::string file = [] {
    int pid = static_cast<int>(getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string f = fmt::format("{}/meshnn_mlp_test_{}.h5", ::testing::TempDir(), pid);
    if (world_rank() == 0) {
      SyntheticFalconMlp spec;
      spec.hidden_size = kHidden;
      spec.intermediate_size = kInter;
      spec.storage = io::StoredType::FLOAT32;
      spec.seed = 99;
      write_synthetic_mlp(f, spec);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return f;
  }();
  return file;
}

std::vector<MeshShape> mesh_shapes(int n) {
  std::vector<MeshShape> shapes;
  for (int r = 1; r <= n; ++r)
    if (n % r == 0) shapes.push_back({r, n / r});
  return shapes;
}

// y = GELU(x W1) W2 in float64 from the values the run actually used (dequantised weights).
std::vector<double> float64_reference(const std::vector<float>& x, int64_t rows, const std::vector<float>& w1,
                                      const std::vector<float>& w2) {
  std::vector<double> h(static_cast<size_t>(rows * kInter)), y(static_cast<size_t>(rows * kHidden), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kInter; ++j) {
      double s = 0;
      for (int64_t k = 0; k < kHidden; ++k) s += double(x[r * kHidden + k]) * w1[k * kInter + j];
      h[r * kInter + j] = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kHidden; ++j) {
      double s = 0;
      for (int64_t k = 0; k < kInter; ++k) s += h[r * kInter + k] * w2[k * kHidden + j];
      y[r * kHidden + j] = s;
    }
  return y;
}

struct Combo {
  DataType weights, acts;
  double min_pcc;  // vs the single-device result and vs float64
};

void run_all_modes(const Combo& combo) {
  const std::string file = weights_file();
  const int64_t batch = 3, seq = 20;  // batch 3 does not split evenly: dp pads it
  const std::vector<float> x_values = io::synthetic_values(5, io::kInputTensorId, batch * seq * kHidden, 1.0);
  const Tensor x_host = Tensor::from_float(x_values, Shape{batch, seq, kHidden}, combo.acts, Layout::TILE);

  // Single-device result and float64 reference, computed on every rank from the whole model.
  auto self = MeshDevice::open({1, 1}, Topology::RING, MPI_COMM_SELF);
  MlpOptions single_options;
  single_options.mode = ParallelMode::DP;
  single_options.weight_dtype = combo.weights;
  single_options.act_dtype = combo.acts;
  const FalconMlp single = FalconMlp::load(file, -1, self, single_options);
  const Tensor single_y = falcon_mlp_reference(x_host, single.w1().local(), single.w2().local(), combo.acts);
  const std::vector<double> y64 =
      float64_reference(x_host.to_float(), batch * seq, single.w1().local().to_float(), single.w2().local().to_float());
  const std::vector<float> y64f(y64.begin(), y64.end());

  struct ModeCase {
    ParallelMode mode;
    TpVariant variant;
  };
  for (MeshShape ms : mesh_shapes(world_size())) {
    for (ModeCase mc : {ModeCase{ParallelMode::DP, TpVariant::REDUCE_SCATTER}, {ParallelMode::TP, TpVariant::REDUCE_SCATTER},
                        {ParallelMode::TP, TpVariant::ALL_REDUCE}, {ParallelMode::TP, TpVariant::ALL_GATHER},
                        {ParallelMode::TWO_D, TpVariant::REDUCE_SCATTER}, {ParallelMode::HYBRID, TpVariant::ALL_REDUCE},
                        {ParallelMode::TP, TpVariant::PLANNED}, {ParallelMode::HYBRID, TpVariant::PLANNED}}) {
      auto mesh = MeshDevice::open(ms);
      MlpOptions o = single_options;
      o.mode = mc.mode;
      o.tp_variant = mc.variant;
      const FalconMlp mlp = FalconMlp::load(file, -1, mesh, o);
      const MeshTensor x = distribute_tensor(x_host, mlp.input_mapper(), mesh);
      PhaseTimes times;
      const Tensor y = full_tensor(mlp.forward(x, times));
      const double vs_single = pcc(single_y, y);
      const double vs_f64 = pcc(y64f, y.to_float());
      EXPECT_TRUE(all_ranks_ok(y.shape() == x_host.shape() && vs_single >= combo.min_pcc && vs_f64 >= combo.min_pcc))
          << ms.to_string() << " " << to_string(mc.mode) << "/" << to_string(mc.variant) << " weights "
          << to_string(combo.weights) << ": PCC vs single " << vs_single << ", vs float64 " << vs_f64;
    }
  }
}

TEST(FalconMlp, Float32AgreesInEveryModeAndMesh) { run_all_modes({DataType::FLOAT32, DataType::FLOAT32, 0.99999}); }
TEST(FalconMlp, Bfloat16WeightsAgreeInEveryModeAndMesh) { run_all_modes({DataType::BFLOAT16, DataType::BFLOAT16, 0.999}); }
TEST(FalconMlp, Bfloat8WeightsAgreeInEveryModeAndMesh) { run_all_modes({DataType::BFLOAT8_B, DataType::BFLOAT16, 0.999}); }

// Where the planner keeps the hand-placed plan (the product where it is, then a reduce_scatter),
// the planned variant gives the reduce_scatter variant's bits.
TEST(FalconMlp, PlannedVariantKeepingTheHandPlacedPlanGivesItsBits) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
  auto mesh = MeshDevice::open({1, world_size()});
  MlpOptions o;
  o.tp_variant = TpVariant::PLANNED;
  const FalconMlp planned = FalconMlp::load(weights_file(), -1, mesh, o);
  o.tp_variant = TpVariant::REDUCE_SCATTER;
  const FalconMlp by_hand = FalconMlp::load(weights_file(), -1, mesh, o);
  const Shape shape{2, 32, planned.hidden_size()};
  const Tensor x_host = Tensor::from_float(testing::seeded_values(shape.volume(), 21), shape, o.act_dtype, Layout::TILE);
  const MeshTensor x = distribute_tensor(x_host, planned.input_mapper(), mesh);
  const distributed::MatmulPlan plan = planned.ff2_plan(x.shape());
  ASSERT_TRUE(plan.a.steps.empty() && plan.b.steps.empty()) << plan.explain();
  ASSERT_EQ(plan.output.steps.size(), 1u) << plan.explain();
  ASSERT_EQ(plan.output.steps[0].kind, distributed::StepKind::REDUCE_SCATTER) << plan.explain();
  PhaseTimes times;
  const MeshTensor y = planned.forward(x, times), y_by_hand = by_hand.forward(x, times);
  EXPECT_EQ(y.placements(), y_by_hand.placements());
  EXPECT_TRUE(all_ranks_ok(testing::bitwise_equal(full_tensor(y), full_tensor(y_by_hand))));
}

TEST(FalconMlp, ShapeMismatchAndBadOptionsFailAlike) {
  auto mesh = MeshDevice::open({1, world_size()});
  MlpOptions o;
  o.act_dtype = DataType::BFLOAT8_B;
  const std::string bad_act = testing::error_message_of([&] { FalconMlp::load(weights_file(), -1, mesh, o); });
  EXPECT_TRUE(all_ranks_ok(bad_act.find("activations must be float32 or bfloat16") != std::string::npos)) << bad_act;
  const std::string missing_layer = testing::error_message_of([&] { FalconMlp::load(weights_file(), 3, mesh, MlpOptions{}); });
  EXPECT_TRUE(all_ranks_ok(missing_layer.find("transformer.h.3.mlp.dense_h_to_4h.weight") != std::string::npos))
      << missing_layer;
  EXPECT_TRUE(testing::same_on_all_ranks(missing_layer));
}

}  // namespace
}  // namespace meshnn::models::falcon
