// libFuzzer target: the HDF5 loader's validation layer. The input bytes become a file; inspecting
// its datasets and attributes and reading the small ones must end in success or meshnn::Error,
// never a crash, a sanitizer report or a hang.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "meshnn/core/error.hpp"
#include "meshnn/io/hdf5_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/meshnn_fuzz_" + std::to_string(getpid()) + ".h5";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  try {
    (void)meshnn::io::read_root_attributes_local(path);
  } catch (const meshnn::Error&) {
  }
  for (const char* name : {"dense_h_to_4h.weight", "dense_4h_to_h.weight", "input"}) {
    try {
      const meshnn::io::DatasetInfo info = meshnn::io::inspect_dataset_local(path, name);
      int64_t volume = 1;
      for (int64_t d : info.shape) volume *= d;
      if (volume <= (1 << 16)) (void)meshnn::io::read_dataset_local(path, name, {});
    } catch (const meshnn::Error&) {
    }
  }
  return 0;
}
