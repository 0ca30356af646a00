// meshnn-kernel-bench's command line (see kernel_bench_options.hpp).
#include "kernel_bench_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshnn/runtime/cli.hpp"

namespace meshnn::bench {
namespace {

const std::vector<BenchShape> kShapes = {
    {"prefill128", 128, 4544, 18176}, {"prefill2048", 2048, 4544, 4544}, {"decode32", 32, 4544, 18176},
    {"decode1", 1, 4544, 18176},      {"decode32_70b", 32, 8192, 3584},  {"decode1_70b", 1, 8192, 3584},
    {"cube1024", 1024, 1024, 1024},   {"tinyllama_ff1", 128, 2048, 5632}, {"tinyllama_ff2", 128, 5632, 2048},
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// `text` as `count` integers in [1, max] joined by 'x' (e.g. 128x2048x5632); empty if it is not.
std::vector<int64_t> dims_or_nothing(const std::string& text, size_t count, int64_t max) {
  std::vector<int64_t> dims;
  try {
    dims = parse_int_list(text, 1, max, 'x');
  } catch (const UsageError&) {
  }
  if (dims.size() != count) dims.clear();
  return dims;
}

// --shapes: names of kShapes or MxKxN, comma-separated.
std::vector<BenchShape> parse_shapes(const std::string& text) {
  std::vector<BenchShape> shapes;
  for (const auto& name : split(text, ',')) {
    auto it = std::find_if(kShapes.begin(), kShapes.end(), [&](const BenchShape& s) { return s.name == name; });
    if (it != kShapes.end()) {
      shapes.push_back(*it);
      continue;
    }
    const std::vector<int64_t> dims = dims_or_nothing(name, 3, 1 << 20);
    if (dims.empty())
      throw UsageError(fmt::format("unknown shape '{}' (a name or MxKxN, each in [1, 1048576])", name));
    shapes.push_back({name, dims[0], dims[1], dims[2]});
  }
  return shapes;
}

std::vector<DataType> parse_dtypes(const std::string& text) {
  std::vector<DataType> dtypes;
  for (const auto& d : split(text, ',')) dtypes.push_back(parse_data_type(d));
  return dtypes;
}

std::vector<int> parse_thread_counts(const std::string& text) {
  const std::vector<int64_t> counts = parse_int_list(text, 1, 1024);
  return {counts.begin(), counts.end()};
}

// --attention: UxP items (users x positions), comma-separated.
std::vector<AttentionCase> parse_attention(const std::string& text) {
  std::vector<AttentionCase> cases;
  for (const auto& item : split(text, ',')) {
    const std::vector<int64_t> dims = dims_or_nothing(item, 2, 1 << 16);
    if (dims.empty())
      throw UsageError(fmt::format("bad attention case '{}' (USERSxPOSITIONS, each in [1, 65536])", item));
    cases.push_back({dims[0], dims[1]});
  }
  return cases;
}

// --heads Q/KV: query heads a multiple of the KV heads.
std::pair<int64_t, int64_t> parse_heads(const std::string& text) {
  const std::vector<int64_t> h = parse_int_list(text, 1, 1024, '/');
  if (h.size() != 2 || h[0] % h[1] != 0)
    throw UsageError(fmt::format("bad heads '{}' (Q/KV, Q a multiple of KV, e.g. 32/4)", text));
  return {h[0], h[1]};
}

}  // namespace

BenchOptions parse_options(int argc, char** argv) {
  BenchOptions o;
  std::string threads = "1", shapes, dtypes = "float32,bfloat16,bfloat8_b,bfloat4_b", act = "float32";
  std::string blas_threads = "same", attention, heads = "32/4", kv_dtype = "bfloat16";
  std::string shape_help = "shapes: names or MxKxN, comma-separated:";
  for (const auto& s : kShapes) shape_help += fmt::format(" {}={}x{}x{}", s.name, s.m, s.k, s.n);
  CLI::App cli("GFLOP/s and weight GB/s of meshnn's matmul beside OpenBLAS (and oneDNN with --act bfloat16).",
               "meshnn-kernel-bench");
  cli.add_option("--threads", threads, "worker thread counts, e.g. 1,2")->type_name("LIST")->check(parsed_by(parse_thread_counts));
  cli.add_option("--shapes", shapes, shape_help + " (default: all)")->type_name("LIST")->check(parsed_by(parse_shapes));
  cli.add_option("--dtypes", dtypes, "weight dtypes")->type_name("LIST")->check(parsed_by(parse_dtypes));
  cli.add_option("--act", act, "activation dtype")->check(CLI::IsMember({"float32", "bfloat16"}));
  cli.add_option("--min-time", o.min_time, "seconds each measurement runs at least")->check(FiniteRange(0.0, 3600.0));
  cli.add_option("--openblas-threads", blas_threads, "OpenBLAS threads: same (as ours) or a number")
      ->transform(CLI::IsMember({"same"}) | IntRange(1, 1024));
  cli.add_flag("--ceiling", o.ceiling, "also time independent 1-thread matmuls on every worker at once (see the file header)");
  cli.add_option("--json", o.json_path, "also write one JSON record per row")->type_name("FILE");
  cli.add_flag("--bandwidth", o.bandwidth_only,
               "only measure the read bandwidth of 1, 2, ... cores streaming at once (one per --threads count)");
  cli.add_option("--attention", attention,
                 "only time decode attention over a KV cache (attention_with_kv_cache, head dim 64): "
                 "USERSxPOSITIONS cases, e.g. 1x150,32x1000")
      ->type_name("LIST")
      ->check(parsed_by(parse_attention));
  cli.add_option("--heads", heads, "query/KV heads of the --attention rows")->type_name("Q/KV")->check(parsed_by(parse_heads));
  cli.add_option("--kv-dtype", kv_dtype, "KV cache dtype of the --attention rows")
      ->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b"}));
  parse_command_line(cli, argc, argv);

  // The checks above let through only what these conversions accept.
  o.thread_counts = parse_thread_counts(threads);
  o.shapes = shapes.empty() ? kShapes : parse_shapes(shapes);
  o.dtypes = parse_dtypes(dtypes);
  o.act = parse_data_type(act);
  o.openblas_threads = blas_threads == "same" ? 0 : std::stoi(blas_threads);
  if (!attention.empty()) o.attention = parse_attention(attention);
  std::tie(o.q_heads, o.kv_heads) = parse_heads(heads);
  o.kv_dtype = parse_data_type(kv_dtype);
  return o;
}

}  // namespace meshnn::bench
