// HDF5 loading over real ranks: a generated file loads bit-exactly into every placement, dtype and
// layout; every broken-file case gives one clear message, the same on every rank, and no hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "meshnn/core/error.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::all_ranks_ok;
using testing::bitwise_equal;
using testing::same_on_all_ranks;
using testing::world_rank;
using testing::transpose;
using testing::all_mesh_shapes;
using testing::world_size;

// A directory every rank agrees on (rank 0's pid), created by rank 0.
std::string shared_temp_dir() {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string dir = fmt::format("{}/meshnn_io_test_{}", ::testing::TempDir(), pid);
  if (world_rank() == 0) std::system(fmt::format("mkdir -p '{}'", dir).c_str());
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

// Rank 0 writes, everyone waits.
template <class Fn>
void write_on_root(Fn&& fn) {
  if (world_rank() == 0) fn();
  MPI_Barrier(MPI_COMM_WORLD);
}

class Hdf5Io : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(shared_temp_dir());
    // [out=200, in=72]: neither divisible by 32, exact values (multiples of 1/64).
    write_on_root([] {
      io::Hdf5Writer w(*dir_ + "/exact.h5");
      for (auto type : {io::StoredType::FLOAT32, io::StoredType::BFLOAT16}) {
        const std::string name = type == io::StoredType::FLOAT32 ? "w.f32" : "w.bf16";
        w.create_dataset(name, {kOut, kIn}, type, /*chunked=*/type == io::StoredType::BFLOAT16);
        w.write_rows(name, 0, io::synthetic_values(7, 1, kOut * kIn, 1.0, /*exact=*/true));
      }
      w.create_dataset("has_nan", {4, 4}, io::StoredType::FLOAT32);
      std::vector<float> v(16, 1.0f);
      v[5] = std::nanf("");
      w.write_rows("has_nan", 0, v);
      w.set_attribute("hidden_size", int64_t{72});
      w.set_attribute("model_type", std::string("falcon"));
      w.commit();
    });
  }
  static void TearDownTestSuite() {
    write_on_root([] { std::system(fmt::format("rm -rf '{}'", *dir_).c_str()); });
    delete dir_;
  }
  static constexpr int64_t kOut = 200, kIn = 72;
  static std::string* dir_;
};
std::string* Hdf5Io::dir_ = nullptr;

TEST_F(Hdf5Io, LoadsBitExactlyIntoEveryPlacementDtypeAndLayout) {
  const std::string file = *dir_ + "/exact.h5";
  const std::vector<float> stored = io::synthetic_values(7, 1, kOut * kIn, 1.0, true);
  struct Format {
    DataType dtype;
    Layout layout;
  };
  const Format formats[] = {{DataType::FLOAT32, Layout::TILE}, {DataType::BFLOAT16, Layout::TILE},
                            {DataType::BFLOAT8_B, Layout::TILE}, {DataType::BFLOAT4_B, Layout::TILE},
                            {DataType::FLOAT32, Layout::ROW_MAJOR}, {DataType::BFLOAT16, Layout::ROW_MAJOR}};
  for (MeshShape ms : all_mesh_shapes(world_size())) {
    auto mesh = MeshDevice::open(ms);
    for (const std::string dataset : {"w.f32", "w.bf16"}) {
      for (bool transposed : {true, false}) {
        const std::vector<float> host_values = transposed ? transpose(stored, kOut, kIn) : stored;
        const Shape host_shape = transposed ? Shape{kIn, kOut} : Shape{kOut, kIn};
        for (const Format& f : formats) {
          // The loader quantises each shard from the stored values, so the reference is the float32
          // shard cast to the dtype (for block floats this differs from slicing an already
          // quantised tensor when a cut splits a 16-value block).
          const Tensor host = Tensor::from_float(host_values, host_shape, DataType::FLOAT32, f.layout);
          // 200 and 72 split unevenly over most meshes, so padding is on; both dims get sharded.
          for (const MeshMapperConfig& mapper :
               {ReplicateTensorToMesh(), ShardTensorToMesh(0, true), ShardTensorToMesh(-1, true),
                ShardTensor2dMesh(0, 1, true), ShardTensor2dMesh(1, 0, true)}) {
            const MeshTensor loaded = io::load_tensor(file, dataset, mapper, mesh, {f.dtype, f.layout, transposed});
            const MeshTensor expected = distribute_tensor(host, mapper, mesh);
            const bool ok = loaded.shape() == host_shape && loaded.placements() == expected.placements() &&
                            bitwise_equal(loaded.local(), expected.local().typecast(f.dtype));
            EXPECT_TRUE(all_ranks_ok(ok)) << ms.to_string() << " " << dataset << " " << to_string(f.dtype) << " "
                                          << to_string(f.layout) << " T=" << transposed << " "
                                          << to_string(mapper.placements);
          }
        }
      }
    }
  }
}

TEST_F(Hdf5Io, RootAttributesAndDatasetInfo) {
  auto mesh = MeshDevice::open({1, world_size()});
  const io::Attributes attrs = io::read_root_attributes(*dir_ + "/exact.h5", mesh);
  EXPECT_EQ(io::required_int_attribute(attrs, "hidden_size", "exact.h5"), 72);
  EXPECT_EQ(std::get<std::string>(attrs.at("model_type")), "falcon");
  EXPECT_THROW(io::required_int_attribute(attrs, "vocab_size", "exact.h5"), Error);
  const io::DatasetInfo info = io::inspect_dataset(*dir_ + "/exact.h5", "w.bf16", mesh);
  EXPECT_EQ(info.shape, (std::vector<int64_t>{kOut, kIn}));
  EXPECT_EQ(info.type, io::StoredType::BFLOAT16);
}

TEST_F(Hdf5Io, BrokenFilesFailWithOneClearMessageOnEveryRank) {
  auto mesh = MeshDevice::open({1, world_size()});
  const std::string good = *dir_ + "/exact.h5";
  write_on_root([&] {
    // Truncated: the first half of a valid file. Corrupt: the right signature, garbage after it.
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(*dir_ + "/truncated.h5", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    std::string corrupt = bytes.substr(0, 8) + std::string(4096, '\x5a');
    std::ofstream(*dir_ + "/corrupt.h5", std::ios::binary).write(corrupt.data(), static_cast<std::streamsize>(corrupt.size()));
    std::ofstream(*dir_ + "/text.h5") << "not hdf5\n";
  });
  const io::LoadOptions weights{DataType::BFLOAT16, Layout::TILE, true};
  io::LoadOptions wrong_shape = weights;
  wrong_shape.expected_shape = std::vector<int64_t>{72, 200};
  struct Case {
    std::string file, dataset;
    io::LoadOptions options;
    std::string expect;  // must appear in the message
  };
  const Case cases[] = {
      {*dir_ + "/missing.h5", "w.f32", weights, "cannot open"},
      {*dir_ + "/text.h5", "w.f32", weights, "not a readable HDF5 file"},
      {*dir_ + "/truncated.h5", "w.f32", weights, "truncated"},
      {*dir_ + "/corrupt.h5", "w.f32", weights, "corrupt"},
      {good, "no.such.weight", weights, "dataset 'no.such.weight' not found"},
      {good, "w.f32", wrong_shape, "has shape [200, 72], expected [72, 200]"},
      {good, "has_nan", weights, "contains NaN"},
  };
  for (const Case& c : cases) {
    const std::string message =
        testing::error_message_of([&] { io::load_tensor(c.file, c.dataset, ShardTensorToMesh(0, true), mesh, c.options); });
    EXPECT_TRUE(all_ranks_ok(message.find(c.expect) != std::string::npos && message.find(c.file) != std::string::npos))
        << message;
    EXPECT_TRUE(same_on_all_ranks(message)) << message;
  }
  // Still usable afterwards.
  const MeshTensor ok = io::load_tensor(good, "w.f32", ShardTensorToMesh(0, true), mesh, weights);
  EXPECT_TRUE(all_ranks_ok(ok.shape() == (Shape{kIn, kOut})));
}

TEST_F(Hdf5Io, WritingIsAtomic) {
  const std::string out = fmt::format("{}/out_{}.h5", *dir_, world_rank());
  const Tensor t = testing::seeded_tensor(Shape{3, 5}, DataType::FLOAT32, Layout::ROW_MAJOR, 1);
  io::write_file(out, {{"output", &t}}, {{"mesh", std::string("1x2")}});
  bool ok = access(out.c_str(), R_OK) == 0 && access(fmt::format("{}.tmp.{}", out, getpid()).c_str(), F_OK) != 0;
  // An unwritable place: error, and nothing left behind.
  const std::string bad = "/proc/meshnn_cannot_write_here.h5";
  const std::string message = testing::error_message_of([&] { io::write_file(bad, {{"output", &t}}, {}); });
  ok = ok && message.find("cannot create") != std::string::npos && access(bad.c_str(), F_OK) != 0;
  // An uncommitted writer removes its temporary.
  {
    io::Hdf5Writer w(out + ".partial");
    w.create_dataset("x", {2, 2}, io::StoredType::FLOAT32);
  }
  ok = ok && access(fmt::format("{}.partial.tmp.{}", out, getpid()).c_str(), F_OK) != 0 &&
       access((out + ".partial").c_str(), F_OK) != 0;
  EXPECT_TRUE(all_ranks_ok(ok)) << message;
}

}  // namespace
}  // namespace meshnn
