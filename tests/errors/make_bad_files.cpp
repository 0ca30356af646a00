// Writes the broken inputs the error tier feeds to the apps: one small valid Falcon MLP file and
// variants with each defect the loaders must report (see tests/errors/error_cases.py).
//   make_bad_files DIR
//   make_bad_files --llama DEFECT SOURCE TARGET   (a copy of a Llama checkpoint with one defect:
//       missing-layer   the attributes claim one layer more than it holds
//       nan             one element of a layer weight is NaN
//       no-attribute    the root attribute hidden_size is gone
//       inconsistent    intermediate_size disagrees with the MLP weights' shapes
//       qwen2-no-bias   model_type "qwen2" (q/k/v biases) on a file without them)
//   make_bad_files --llama-tokens DEFECT TARGET   (prompts for the tiny preset, 4 of 8 tokens:
//       empty-prompt    prompt_lengths gives the second prompt 0 tokens
//       zero-new-tokens max_new_tokens asks the last prompt for 0 new tokens)
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

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

namespace {

// Overwrites one 64-bit integer root attribute.
void set_int_attribute(hid_t f, const char* name, int64_t value) {
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
}

// Overwrites a fixed-length string root attribute with a value of the same length.
void set_string_attribute(hid_t f, const char* name, const std::string& value) {
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  hid_t type = H5Aget_type(a);
  std::string stored = value;
  stored.resize(H5Tget_size(type), '\0');
  H5Awrite(a, type, stored.data());
  H5Tclose(type);
  H5Aclose(a);
}

int64_t int_attribute(hid_t f, const char* name) {
  int64_t value = 0;
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
  return value;
}

// Element [0, 0] of a weight made NaN, in the dataset's own storage (float32, or bfloat16 bits).
void poison_first_element(hid_t f, const char* dataset) {
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  hid_t type = H5Dget_type(d), space = H5Dget_space(d);
  const hsize_t start[2] = {0, 0}, count[2] = {1, 1};
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
  hid_t one = H5Screate_simple(2, count, nullptr);
  if (H5Tget_class(type) == H5T_FLOAT) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    H5Dwrite(d, H5T_NATIVE_FLOAT, one, space, H5P_DEFAULT, &nan);
  } else {
    const uint16_t nan_bits = 0x7FC0;  // a bfloat16 quiet NaN
    H5Dwrite(d, H5T_NATIVE_UINT16, one, space, H5P_DEFAULT, &nan_bits);
  }
  H5Sclose(one);
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(d);
}

}  // namespace

// A copy of a Llama checkpoint with one defect (see the usage at the top).
int llama_defect(const std::string& defect, const std::string& source, const std::string& target) {
  {
    std::ifstream in(source, std::ios::binary);
    std::ofstream out(target, std::ios::binary);
    out << in.rdbuf();
  }
  hid_t f = H5Fopen(target.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return 1;
  int status = 0;
  if (defect == "missing-layer")
    set_int_attribute(f, "num_hidden_layers", int_attribute(f, "num_hidden_layers") + 1);
  else if (defect == "nan")
    poison_first_element(f, "model.layers.1.mlp.down_proj.weight");
  else if (defect == "no-attribute")
    H5Adelete(f, "hidden_size");
  else if (defect == "inconsistent")
    set_int_attribute(f, "intermediate_size", int_attribute(f, "intermediate_size") + 32);
  else if (defect == "qwen2-no-bias")
    set_string_attribute(f, "model_type", "qwen2");
  else
    status = 2;
  H5Fclose(f);
  return status;
}

// Prompts for the tiny preset (vocabulary 250) with one defect (see the usage at the top).
int llama_tokens_defect(const std::string& defect, const std::string& target) {
  constexpr int64_t kBatch = 4, kSeq = 8;
  io::Hdf5Writer w(target);
  w.create_dataset("tokens", {kBatch, kSeq}, io::StoredType::INT32);
  std::vector<int32_t> ids(kBatch * kSeq);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(1 + (i * 37) % 240);
  w.write_rows("tokens", 0, ids);
  if (defect == "empty-prompt") {
    w.create_dataset("prompt_lengths", {kBatch}, io::StoredType::INT32);
    w.write_rows("prompt_lengths", 0, std::vector<int32_t>{kSeq, 0, kSeq, kSeq});
  } else if (defect == "zero-new-tokens") {
    w.create_dataset("max_new_tokens", {kBatch}, io::StoredType::INT32);
    w.write_rows("max_new_tokens", 0, std::vector<int32_t>{2, 2, 2, 0});
  } else {
    return 2;
  }
  w.commit();
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  int status = 2;  // a usage error unless a mode below ran
  if (mode == "--llama" && argc == 5) status = llama_defect(argv[2], argv[3], argv[4]);
  if (mode == "--llama-tokens" && argc == 4) status = llama_tokens_defect(argv[2], argv[3]);
  if (mode.rfind("--", 0) == 0 || argc != 2) {
    if (status == 2)
      std::fprintf(stderr, "usage: make_bad_files DIR | --llama DEFECT SOURCE TARGET | --llama-tokens DEFECT TARGET\n");
    return status;
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
