// Where a mesh tensor's data lives along one mesh axis (TT-NN's PlacementReplicate /
// PlacementShard), plus meshnn's Partial: a result awaiting a reduction along that axis (e.g. the
// output of a row-parallel matmul), so that a forgotten reduction is an error, not wrong numbers.
#pragma once

#include <array>
#include <string>
#include <variant>

namespace meshnn {

enum class ReduceOp { SUM, MAX, MIN, MEAN };
std::string_view to_string(ReduceOp op);  // "sum", "max", "min", "mean"

struct Replicate {
  bool operator==(const Replicate&) const = default;
};
struct Shard {
  int dim;  // tensor dim; negative dims are normalised when the placement meets a shape
  bool operator==(const Shard&) const = default;
};
struct Partial {
  ReduceOp op = ReduceOp::SUM;
  bool operator==(const Partial&) const = default;
};
using Placement = std::variant<Replicate, Shard, Partial>;

// TT-NN's spellings.
using PlacementReplicate = Replicate;
using PlacementShard = Shard;

// One placement per mesh axis: [0] along a column (cluster_axis 0, the mesh rows),
// [1] along a row (cluster_axis 1, the mesh cols).
using Placements = std::array<Placement, 2>;

std::string to_string(const Placement& p);    // "Replicate()", "Shard(3)", "Partial(sum)"
std::string to_string(const Placements& ps);  // "[Shard(3), Replicate()]"

inline bool is_shard(const Placement& p) { return std::holds_alternative<Shard>(p); }
inline bool is_partial(const Placement& p) { return std::holds_alternative<Partial>(p); }
inline bool is_replicate(const Placement& p) { return std::holds_alternative<Replicate>(p); }

}  // namespace meshnn
