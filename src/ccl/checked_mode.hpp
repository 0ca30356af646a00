// The checked mode (MESHNN_CCL_CHECKED=1 or CclOptions::checked; internal to src/ccl): before a
// collective, every member learns every member's arguments, and all throw the same error when they
// differ, instead of exchanging mismatched buffers.
#pragma once

#include <string>
#include <string_view>

#include "meshnn/ccl/specs.hpp"
#include "meshnn/ccl/transport.hpp"

namespace meshnn::ccl::detail {

bool checked_mode(const CclOptions& o);
// Collective over the transport's members, on the tags of tag_base (an operation of its own).
void check_arguments_agree(Transport& transport, int tag_base, const std::string& what, const std::string& op);
// The arguments that must agree, as one line. out_dim: all_to_all's (-1 for the others).
std::string describe_args(const MeshTensor& t, std::string_view op, int dim, int out_dim, ReduceOp rop, const Group& g,
                          Topology topo, int links, const CclOptions& o);

}  // namespace meshnn::ccl::detail
