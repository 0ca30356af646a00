// One range of a piecewise alpha-beta link model: from `from_bytes` up to the next range's start a
// message of b bytes takes alpha + b * beta. Shared by the point-to-point calibration
// (link_calibration.hpp) and the distributed matmul's cost model (matmul.hpp).
#pragma once

namespace meshnn::distributed {

struct LinkSegment {
  double from_bytes = 0;
  double alpha_s = 0, beta_s_per_byte = 0;
};

}  // namespace meshnn::distributed
