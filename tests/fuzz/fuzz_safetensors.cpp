// libFuzzer target: the safetensors reader. The input bytes become a file; opening it and reading
// every tensor it lists must end in success or meshnn::Error, never a crash, a sanitizer report
// (a view outside the mapping) or a hang.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "meshnn/core/error.hpp"
#include "meshnn/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/meshnn_fuzz_" + std::to_string(getpid()) + ".safetensors";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  try {
    const meshnn::io::SafetensorsFile file(path);
    unsigned sum = 0;
    for (const meshnn::io::SafetensorsTensor& t : file.tensors())
      for (std::byte b : file.bytes(t)) sum += static_cast<unsigned>(b);
    (void)sum;
  } catch (const meshnn::Error&) {
  }
  return 0;
}
