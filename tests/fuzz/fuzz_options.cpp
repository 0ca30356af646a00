// libFuzzer target: every command-line parser meshnn's apps use. The input is split on NUL or
// newline into argv words; parsing must end in success or UsageError/Error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/core/types.hpp"
#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/runtime/options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words{"fuzz"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      words.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  words.push_back(current);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());

  meshnn::OptionParser cli("fuzz", "fuzzing");
  cli.add_option("mesh", "RxC", "mesh", "1x2");
  cli.add_option("batch", "N", "batch", "1");
  cli.add_option("size", "S", "size", "1M");
  cli.add_option("ratio", "X", "ratio", "0.5");
  cli.add_option("dtype", "T", "dtype", "bfloat16");
  cli.add_option("topology", "T", "topology", "ring");
  cli.add_flag("check", "flag");
  try {
    cli.parse(static_cast<int>(argv.size()), argv.data());
    (void)cli.get_int("batch", 1, 1 << 20);
    (void)cli.get_int("size", 1, INT64_MAX, true);
    (void)cli.get_double("ratio", 0, 1);
    (void)cli.flag("check");
    (void)meshnn::parse_mesh_shape(cli.get("mesh"));
    (void)meshnn::parse_data_type(cli.get("dtype"));
    (void)meshnn::parse_topology(cli.get("topology"));
  } catch (const meshnn::Error&) {
  }
  for (const std::string& w : words) {
    try {
      (void)meshnn::parse_size(w, "word");
    } catch (const meshnn::Error&) {
    }
    try {
      (void)meshnn::parse_mesh_shape(w);
    } catch (const meshnn::Error&) {
    }
    try {
      (void)meshnn::parse_layout(w);
    } catch (const meshnn::Error&) {
    }
    try {
      (void)meshnn::parse_int_list(w, "word", -8, INT64_MAX);
    } catch (const meshnn::Error&) {
    }
  }
  return 0;
}
