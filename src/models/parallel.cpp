#include "meshnn/models/parallel.hpp"

#include <fmt/format.h>

#include "meshnn/core/error.hpp"

namespace meshnn::models {

std::string_view to_string(ParallelMode m) {
  switch (m) {
    case ParallelMode::DP: return "dp";
    case ParallelMode::TP: return "tp";
    case ParallelMode::TWO_D: return "2d";
    case ParallelMode::HYBRID: return "hybrid";
  }
  return "?";
}

ParallelMode parse_parallel_mode(std::string_view name) {
  for (ParallelMode m : {ParallelMode::DP, ParallelMode::TP, ParallelMode::TWO_D, ParallelMode::HYBRID})
    if (name == to_string(m)) return m;
  throw Error(fmt::format("unknown mode '{}' (expected dp, tp, 2d or hybrid)", name));
}

}  // namespace meshnn::models
