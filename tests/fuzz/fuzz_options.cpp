// libFuzzer target: the command-line parsing meshnn's apps use (runtime/cli.hpp over CLI11, and
// the parse functions its checks call). The input is split on NUL or newline into argv words;
// parsing must end in success, HelpRequested or UsageError/Error, never a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/core/types.hpp"
#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/runtime/cli.hpp"

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

  // One option of each kind the apps declare, under the names of the corpus (tests/fuzz/corpus/options).
  CLI::App cli("fuzzing", "fuzz");
  std::string mesh = "1x2", dtype = "bfloat16", topology = "ring", shape = "1,1,64,256";
  int64_t batch = 1, bytes = int64_t{1} << 20;
  double ratio = 0.5;
  bool check = false;
  cli.add_option("--mesh", mesh, "mesh")->check(meshnn::parsed_by(meshnn::parse_mesh_shape));
  cli.add_option("--batch", batch, "batch")->transform(meshnn::IntRange(1, 1 << 20));
  cli.add_option("--size", bytes, "size")->transform(meshnn::SizeRange(1, INT64_MAX));
  cli.add_option("--ratio", ratio, "ratio")->check(meshnn::FiniteRange(0, 1));
  cli.add_option("--dtype", dtype, "dtype")->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b"}));
  cli.add_option("--topology", topology, "topology")->check(meshnn::parsed_by(meshnn::parse_topology));
  cli.add_option("--shape", shape, "shape")
      ->check(meshnn::parsed_by([](const std::string& s) { return meshnn::parse_int_list(s, -8, INT64_MAX); }));
  cli.add_flag("--check", check, "flag");
  try {
    meshnn::parse_command_line(cli, static_cast<int>(argv.size()), argv.data());
  } catch (const meshnn::Error&) {
  }
  for (const std::string& w : words) {
    try {
      (void)meshnn::parse_size(w);
    } catch (const meshnn::Error&) {
    }
    try {
      (void)meshnn::parse_layout(w);
    } catch (const meshnn::Error&) {
    }
    try {
      (void)meshnn::parse_int_list(w, -8, INT64_MAX, 'x');
    } catch (const meshnn::Error&) {
    }
  }
  return 0;
}
