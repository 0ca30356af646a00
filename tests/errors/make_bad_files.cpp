// Writes the broken inputs the error tier feeds to the apps: one small valid Falcon MLP file and
// variants with each defect the loaders must report (see tests/errors/error_cases.py).
//   make_bad_files DIR
//   make_bad_files --llama-missing-layer SOURCE TARGET   (attributes claim one layer more)
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "meshnn/io/synthetic_model.hpp"

using namespace meshnn;

namespace {

constexpr int64_t kHidden = 64, kInter = 256;

void mlp_file(const std::string& path, bool nan, bool inf, bool drop_second, bool wrong_shape, bool no_attrs) {
  io::Hdf5Writer w(path);
  const int64_t inter = wrong_shape ? kInter / 2 : kInter;
  w.create_dataset("dense_h_to_4h.weight", {inter, kHidden}, io::StoredType::BFLOAT16);
  std::vector<float> v = io::synthetic_values(1, 1, inter * kHidden, 0.1);
  if (nan) v[17] = std::numeric_limits<float>::quiet_NaN();
  if (inf) v[v.size() - 3] = -std::numeric_limits<float>::infinity();
  w.write_rows("dense_h_to_4h.weight", 0, v);
  if (!drop_second) {
    w.create_dataset("dense_4h_to_h.weight", {kHidden, kInter}, io::StoredType::FLOAT32);
    w.write_rows("dense_4h_to_h.weight", 0, io::synthetic_values(1, 2, kHidden * kInter, 0.1));
  }
  if (!no_attrs) {
    w.set_attribute("hidden_size", kHidden);
    w.set_attribute("intermediate_size", kInter);
  }
  w.set_attribute("model_type", std::string("falcon"));
  w.commit();
}

void input_file(const std::string& path, const char* dataset, int64_t hidden, bool nan) {
  io::Hdf5Writer w(path);
  w.create_dataset(dataset, {1, 8, hidden}, io::StoredType::FLOAT32);
  std::vector<float> v = io::synthetic_values(2, 3, 8 * hidden, 1.0);
  if (nan) v[5] = std::numeric_limits<float>::quiet_NaN();
  w.write_rows(dataset, 0, v);
  w.commit();
}

// A weight stored as uint8, which no loader accepts.
void wrong_type_file(const std::string& path) {
  mlp_file(path, false, false, true, false, false);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hsize_t dims[2] = {kHidden, kInter};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t d = H5Dcreate2(f, "dense_4h_to_h.weight", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<uint8_t> bytes(kHidden * kInter, 3);
  H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(f);
}

void copy_prefix(const std::string& from, const std::string& to, double fraction, bool garbage_after_header) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out = garbage_after_header ? bytes.substr(0, 8) + std::string(bytes.size() - 8, '\x5a')
                                         : bytes.substr(0, static_cast<size_t>(bytes.size() * fraction));
  std::ofstream(to, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

}  // namespace

// A copy of a Llama checkpoint whose root attributes claim one layer more than it holds.
int llama_missing_layer(const std::string& source, const std::string& target) {
  std::ifstream in(source, std::ios::binary);
  std::ofstream out(target, std::ios::binary);
  out << in.rdbuf();
  out.close();
  hid_t f = H5Fopen(target.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return 1;
  int64_t layers = 0;
  hid_t a = H5Aopen(f, "num_hidden_layers", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_INT64, &layers);
  ++layers;
  H5Awrite(a, H5T_NATIVE_INT64, &layers);
  H5Aclose(a);
  H5Fclose(f);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--llama-missing-layer") return llama_missing_layer(argv[2], argv[3]);
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_bad_files DIR | make_bad_files --llama-missing-layer SOURCE TARGET\n");
    return 2;
  }
  const std::string dir = argv[1];
  mlp_file(dir + "/good.h5", false, false, false, false, false);
  mlp_file(dir + "/nan.h5", true, false, false, false, false);
  mlp_file(dir + "/inf.h5", false, true, false, false, false);
  mlp_file(dir + "/missing_dataset.h5", false, false, true, false, false);
  mlp_file(dir + "/wrong_shape.h5", false, false, false, true, false);
  mlp_file(dir + "/no_attributes.h5", false, false, false, false, true);
  wrong_type_file(dir + "/wrong_type.h5");
  copy_prefix(dir + "/good.h5", dir + "/truncated.h5", 0.5, false);
  copy_prefix(dir + "/good.h5", dir + "/corrupt.h5", 0, true);
  std::ofstream(dir + "/text.h5") << "this is not an HDF5 file\n";
  input_file(dir + "/input_good.h5", "input", kHidden, false);
  input_file(dir + "/input_nan.h5", "input", kHidden, true);
  input_file(dir + "/input_wrong_name.h5", "activations", kHidden, false);
  input_file(dir + "/input_wrong_hidden.h5", "input", kHidden + 32, false);
  return 0;
}
