#include "checked_mode.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "meshnn/core/error.hpp"

namespace meshnn::ccl::detail {

bool checked_mode(const CclOptions& o) {
  // The environment is read once per process (getenv scans the whole, launcher-sized, environment).
  static const bool from_env = [] {
    const char* v = std::getenv("MESHNN_CCL_CHECKED");
    return v && std::string_view(v) == "1";
  }();
  return o.checked || from_env;
}

// Every member learns every member's argument description; all throw the same error on mismatch.
void check_arguments_agree(Transport& transport, int tag_base, const std::string& what, const std::string& op) {
  constexpr size_t kBytes = 512;
  std::vector<char> mine(kBytes, 0), all(kBytes * transport.size());
  std::memcpy(mine.data(), what.data(), std::min(what.size(), kBytes - 1));
  CclOptions o;
  o.algorithm = Algorithm::DIRECT;
  CallContext ctx{transport, tag_base, Topology::RING, 1, o, op + " (checked-mode argument exchange)"};
  all_gather_bytes(ctx, mine.data(), kBytes, all.data());
  std::map<std::string, std::vector<int>> groups;
  for (int k = 0; k < transport.size(); ++k) groups[std::string(all.data() + k * kBytes)].push_back(k);
  if (groups.size() == 1) return;
  std::string message = fmt::format("{}: arguments differ across the group (checked mode):", op);
  for (const auto& [desc, members] : groups) message += fmt::format(" members {} have [{}];", fmt::join(members, ","), desc);
  throw Error(message);
}

std::string describe_args(const MeshTensor& t, std::string_view op, int dim, int out_dim, ReduceOp rop, const Group& g,
                          Topology topo, int links, const CclOptions& o) {
  return fmt::format("{} shape={} shard={} dtype={} layout={} placements={} dim={}{} op={} axis={} topology={} links={} "
                     "algorithm={} chunk={} wire={}",
                     op, t.shape(), t.shard_shape(), to_string(t.dtype()), to_string(t.layout()),
                     to_string(t.placements()), dim, out_dim >= 0 ? fmt::format(" out_dim={}", out_dim) : "",
                     to_string(rop), g.cluster_axis ? std::to_string(*g.cluster_axis) : "none",
                     to_string(topo), links, to_string(o.algorithm), o.chunk_bytes, o.partials_in_input_dtype);
}

}  // namespace meshnn::ccl::detail
