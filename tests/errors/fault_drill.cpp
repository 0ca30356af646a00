// A job for the error tier to break on purpose:
//   fault_drill kill <victim> OUT   rank <victim> SIGKILLs itself in the middle of an all_reduce loop
//   fault_drill stop <victim> OUT   rank <victim> SIGSTOPs itself (stops progressing)
//   fault_drill mismatch            each rank passes a different shape to a checked all_reduce
//   fault_drill run <unused> OUT    no fault: the loop finishes and OUT is written
// Rank 0 streams results into OUT through the atomic writer, so a job that dies must leave no OUT.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/runtime/app.hpp"
#include "meshnn/distributed/distribute.hpp"

using namespace meshnn;

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime& rt, int argc, char** argv) {
    if (argc < 2) throw UsageError("fault_drill kill|stop|mismatch|run [victim] [output]");
    const std::string what = argv[1];
    auto mesh = MeshDevice::open({1, rt.world_size()});
    if (what == "mismatch") {
      CclOptions checked;
      checked.checked = true;
      // Every rank builds a Replicate tensor of a different length: only the checked mode can tell.
      const int64_t n = 64 * (1 + mesh->device_id());
      const Tensor local = Tensor::from_float(std::vector<float>(static_cast<size_t>(n), 1.0f), Shape{n}, DataType::FLOAT32, Layout::ROW_MAJOR);
      const MeshTensor t(mesh, Shape{n}, {Replicate{}, Replicate{}}, local);
      all_reduce(t, ReduceOp::SUM, std::nullopt, std::nullopt, 1, checked);
      return 0;
    }
    const int victim = argc > 2 ? std::stoi(argv[2]) : -1;
    const std::string output = argc > 3 ? argv[3] : "";
    const int64_t n = 1 << 20;
    const Tensor ones = Tensor::from_float(std::vector<float>(static_cast<size_t>(n), 1.0f), Shape{n}, DataType::FLOAT32, Layout::ROW_MAJOR);
    const MeshTensor t(mesh, Shape{n}, {Replicate{}, Replicate{}}, ones);
    std::unique_ptr<io::Hdf5Writer> writer;
    const int iterations = 20;
    if (mesh->device_id() == 0 && !output.empty()) {
      writer = std::make_unique<io::Hdf5Writer>(output);
      writer->create_dataset("output", {iterations, n}, io::StoredType::FLOAT32);
    }
    for (int i = 0; i < iterations; ++i) {
      if (mesh->device_id() == victim && i == 5) {
        std::fprintf(stderr, "fault_drill: rank %d raising %s\n", victim, what == "kill" ? "SIGKILL" : "SIGSTOP");
        std::fflush(stderr);
        raise(what == "kill" ? SIGKILL : SIGSTOP);
      }
      const MeshTensor sum = all_reduce(t);
      if (writer) writer->write_rows("output", i, sum.local().to_float());
    }
    if (writer) writer->commit();
    return 0;
  });
}
