// Files written by h5py (tests/io/h5py_files.py, run by ctest before this test) load as meshnn's
// own files do: every kind of string attribute h5py writes (variable- and fixed-length, ASCII and
// UTF-8), float32 / float16 / bfloat16 datasets stored contiguous, chunked and deflate-compressed,
// bit-exactly into every placement, compared with the values the script wrote beside each file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/distributed/distribute.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using testing::all_ranks_ok;
using testing::bitwise_equal;
using testing::transpose;
using testing::world_size;

std::string files_dir() {
  const char* dir = std::getenv("MESHNN_H5PY_DIR");
  return dir != nullptr ? dir : "";
}

const char* const kKinds[] = {"vlen_utf8", "vlen_ascii", "fixed_ascii", "fixed_utf8"};

struct Dataset {
  const char* name;
  std::vector<int64_t> shape;
  io::StoredType type;
};
const std::vector<Dataset>& datasets() {
  using io::StoredType;
  static const std::vector<Dataset> all = {
      {"w.f32.contiguous", {40, 72}, StoredType::FLOAT32}, {"w.f32.chunked", {40, 72}, StoredType::FLOAT32},
      {"w.f32.deflate", {40, 72}, StoredType::FLOAT32},    {"w.f16.contiguous", {40, 72}, StoredType::FLOAT16},
      {"w.f16.chunked", {40, 72}, StoredType::FLOAT16},    {"w.f16.deflate", {40, 72}, StoredType::FLOAT16},
      {"w.bf16.contiguous", {40, 72}, StoredType::BFLOAT16}, {"w.bf16.chunked", {40, 72}, StoredType::BFLOAT16},
      {"w.bf16.deflate", {40, 72}, StoredType::BFLOAT16},  {"norm.bf16", {72}, StoredType::BFLOAT16},
      {"act.f32", {2, 3, 72}, StoredType::FLOAT32}};
  return all;
}

std::vector<float> expected_values(const std::string& file, const std::string& dataset) {
  std::ifstream in(file + "." + dataset + ".bin", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class H5pyFiles : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(files_dir().empty()) << "MESHNN_H5PY_DIR is not set (run through ctest)"; }
  static std::string file(const char* kind) { return files_dir() + "/strings_" + kind + ".h5"; }
};

TEST_F(H5pyFiles, StringAttributesOfEveryKindAreRead) {
  for (const char* kind : kKinds) {
    const io::Attributes attrs = io::read_root_attributes_local(file(kind));
    ASSERT_TRUE(attrs.count("model_type")) << kind;
    EXPECT_EQ(std::get<std::string>(attrs.at("model_type")), "llama") << kind;
    EXPECT_EQ(io::required_int_attribute(attrs, "hidden_size", file(kind)), 72) << kind;
    EXPECT_EQ(std::get<double>(attrs.at("rms_norm_eps")), 1e-5) << kind;
    EXPECT_EQ(std::get<int64_t>(attrs.at("tie_word_embeddings")), 1) << kind;
  }
  // UTF-8 beyond ASCII comes back byte for byte, variable- and fixed-length.
  for (const char* name : {"utf8_names.h5", "utf8_fixed.h5"}) {
    const io::Attributes attrs = io::read_root_attributes_local(files_dir() + "/" + name);
    ASSERT_TRUE(attrs.count("model_type")) << name;
    EXPECT_EQ(std::get<std::string>(attrs.at("model_type")), "llam\xc3\xa4-\xe2\x98\x83") << name;
  }
  auto mesh = MeshDevice::open({1, world_size()});
  const io::Attributes collective = io::read_root_attributes(file("vlen_utf8"), mesh);
  EXPECT_TRUE(all_ranks_ok(collective.count("model_type") && std::get<std::string>(collective.at("model_type")) == "llama"));
}

TEST_F(H5pyFiles, EveryDatasetReadsBitExactly) {
  for (const char* kind : kKinds) {
    for (const Dataset& d : datasets()) {
      const io::DatasetInfo info = io::inspect_dataset_local(file(kind), d.name);
      EXPECT_EQ(info.shape, d.shape) << kind << " " << d.name;
      EXPECT_EQ(info.type, d.type) << kind << " " << d.name << ": " << io::to_string(info.type);
      const std::vector<float> expected = expected_values(file(kind), d.name);
      ASSERT_FALSE(expected.empty()) << kind << " " << d.name;
      EXPECT_TRUE(same_bits(io::read_dataset_local(file(kind), d.name, {}), expected)) << kind << " " << d.name;
    }
  }
}

TEST_F(H5pyFiles, LoadsBitExactlyIntoEveryPlacement) {
  struct Format {
    DataType dtype;
    Layout layout;
  };
  const Format formats[] = {{DataType::FLOAT32, Layout::TILE},
                            {DataType::BFLOAT16, Layout::TILE},
                            {DataType::BFLOAT8_B, Layout::TILE},
                            {DataType::FLOAT32, Layout::ROW_MAJOR},
                            {DataType::BFLOAT16, Layout::ROW_MAJOR}};
  std::vector<MeshShape> shapes;
  for (int r = 1; r <= world_size(); ++r)
    if (world_size() % r == 0) shapes.push_back({r, world_size() / r});
  for (MeshShape ms : shapes) {
    auto mesh = MeshDevice::open(ms);
    for (const char* kind : {"vlen_utf8", "fixed_ascii"}) {
      for (const Dataset& d : datasets()) {
        if (d.shape.size() != 2) continue;
        const std::vector<float> stored = expected_values(file(kind), d.name);
        const int64_t rows = d.shape[0], cols = d.shape[1];
        for (bool transposed : {false, true}) {
          const std::vector<float> host_values = transposed ? transpose(stored, rows, cols) : stored;
          const Shape host_shape = transposed ? Shape{cols, rows} : Shape{rows, cols};
          for (const Format& f : formats) {
            const Tensor host = Tensor::from_float(host_values, host_shape, DataType::FLOAT32, f.layout);
            for (const MeshMapperConfig& mapper :
                 {ReplicateTensorToMesh(), ShardTensorToMesh(0, true), ShardTensorToMesh(-1, true),
                  ShardTensor2dMesh(0, 1, true)}) {
              io::LoadOptions options{f.dtype, f.layout, transposed};
              const MeshTensor loaded = io::load_tensor(file(kind), d.name, mapper, mesh, options);
              const MeshTensor expected = distribute_tensor(host, mapper, mesh);
              const bool ok = loaded.shape() == host_shape && bitwise_equal(loaded.local(), expected.local().typecast(f.dtype));
              EXPECT_TRUE(all_ranks_ok(ok)) << ms.to_string() << " " << kind << " " << d.name << " "
                                            << to_string(f.dtype) << " " << to_string(f.layout) << " T=" << transposed
                                            << " " << to_string(mapper.placements);
            }
          }
        }
      }
    }
  }
}

// A file meshnn-convert wrote (tests/io/test_convert.py runs this test with the file and some of
// its datasets in the environment; skipped otherwise): each dataset loads into every placement,
// dtype and layout as its values read whole do. test_convert.py has checked those values bit for
// bit against the checkpoint.
TEST(ConvertedFile, LoadsBitExactlyIntoEveryPlacement) {
  const char* file = std::getenv("MESHNN_CONVERTED_FILE");
  const char* names = std::getenv("MESHNN_CONVERTED_DATASETS");
  if (file == nullptr || names == nullptr) GTEST_SKIP() << "run by tests/io/test_convert.py";
  std::vector<std::string> datasets;
  for (std::string rest = names; !rest.empty();) {
    const size_t comma = rest.find(',');
    datasets.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  std::vector<MeshShape> shapes;
  for (int r = 1; r <= world_size(); ++r)
    if (world_size() % r == 0) shapes.push_back({r, world_size() / r});
  for (MeshShape ms : shapes) {
    auto mesh = MeshDevice::open(ms);
    for (const std::string& name : datasets) {
      const io::DatasetInfo info = io::inspect_dataset_local(file, name);
      const std::vector<float> stored = io::read_dataset_local(file, name, {});
      const bool two_d = info.shape.size() == 2;
      for (bool transposed : {false, true}) {
        if (transposed && !two_d) continue;
        const std::vector<float> values = transposed ? transpose(stored, info.shape[0], info.shape[1]) : stored;
        const Shape shape = transposed ? Shape{info.shape[1], info.shape[0]} : Shape(info.shape);
        for (DataType dtype : {DataType::FLOAT32, DataType::BFLOAT16, DataType::BFLOAT8_B}) {
          const Tensor host = Tensor::from_float(values, shape, DataType::FLOAT32, Layout::TILE);
          for (const MeshMapperConfig& mapper : {ReplicateTensorToMesh(), ShardTensorToMesh(-1, true),
                                                 two_d ? ShardTensor2dMesh(0, 1, true) : ShardTensorToMesh(0, true)}) {
            const MeshTensor loaded = io::load_tensor(file, name, mapper, mesh, {dtype, Layout::TILE, transposed});
            const MeshTensor expected = distribute_tensor(host, mapper, mesh);
            EXPECT_TRUE(all_ranks_ok(loaded.shape() == shape && bitwise_equal(loaded.local(), expected.local().typecast(dtype))))
                << ms.to_string() << " " << name << " " << to_string(dtype) << " T=" << transposed << " "
                << to_string(mapper.placements);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace meshnn
