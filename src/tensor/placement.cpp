#include "meshnn/tensor/placement.hpp"

#include <fmt/format.h>

namespace meshnn {

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "sum";
    case ReduceOp::MAX: return "max";
    case ReduceOp::MIN: return "min";
    case ReduceOp::MEAN: return "mean";
  }
  return "?";
}

std::string to_string(const Placement& p) {
  if (const auto* s = std::get_if<Shard>(&p)) return fmt::format("Shard({})", s->dim);
  if (const auto* q = std::get_if<Partial>(&p)) return fmt::format("Partial({})", to_string(q->op));
  return "Replicate()";
}

std::string to_string(const Placements& ps) { return fmt::format("[{}, {}]", to_string(ps[0]), to_string(ps[1])); }

}  // namespace meshnn
