// What every model job shares: the parallel modes of TT-NN's LLM guide (docs/spec/semantics.md §5) and the
// per-rank phase times the jobs report.
//
//   dp      every device a full replica; the batch (the users) split over the devices.
//   tp      tensor-parallel over the devices: column-parallel then row-parallel linears, one
//           reduction after each row-parallel one.
//   2d      weights block-sharded over both mesh axes; reductions along one axis, gathers along
//           the other.
//   hybrid  submeshes as data-parallel replicas, each tensor-parallel inside.
#pragma once

#include <string_view>

#include "meshnn/runtime/phase_times.hpp"

namespace meshnn::models {

enum class ParallelMode { DP, TP, TWO_D, HYBRID };
std::string_view to_string(ParallelMode m);  // "dp", "tp", "2d", "hybrid"
ParallelMode parse_parallel_mode(std::string_view name);  // throws meshnn::Error listing the choices

using meshnn::PhaseTimes;

}  // namespace meshnn::models
