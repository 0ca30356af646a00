// meshnn-kernel-bench's command line: the shapes, weight formats and thread counts to measure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/core/types.hpp"

namespace meshnn::bench {

struct BenchShape {
  std::string name;
  int64_t m, k, n;
};

// --attention: one decode step's attention over a KV cache, `users` rows each at `positions`.
struct AttentionCase {
  int64_t users, positions;
};

struct BenchOptions {
  std::vector<int> thread_counts;  // these four: defaults in parse_options
  std::vector<BenchShape> shapes;
  std::vector<DataType> dtypes;
  DataType act = DataType::FLOAT32;
  std::string json_path;
  double min_time = 0.5;
  int openblas_threads = 0;  // 0: same as ours
  bool ceiling = false;
  bool bandwidth_only = false;
  std::vector<AttentionCase> attention;  // non-empty: only these attention rows
  int64_t q_heads = 32, kv_heads = 4;    // --heads Q/KV (of the --attention rows)
  DataType kv_dtype = DataType::BFLOAT16;
};

// Throws UsageError (runtime/cli.hpp) for a bad command line.
BenchOptions parse_options(int argc, char** argv);

}  // namespace meshnn::bench
