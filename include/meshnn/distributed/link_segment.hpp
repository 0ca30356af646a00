// One range of a piecewise alpha-beta link model: from `from_bytes` up to the next range's start a
// message of b bytes takes alpha + b * beta. Shared by the point-to-point calibration
// (link_calibration.hpp) and the distributed matmul's cost model (matmul.hpp).
#pragma once

#include <span>

namespace meshnn::distributed {

struct LinkSegment {
  double from_bytes = 0;
  double alpha_s = 0, beta_s_per_byte = 0;
};

// The range of `segments` (ascending from_bytes) that holds a message of `bytes`: the last one
// starting at or below it; nullptr when the first starts above it.
inline const LinkSegment* segment_for(std::span<const LinkSegment> segments, double bytes) {
  const LinkSegment* found = nullptr;
  for (const LinkSegment& s : segments)
    if (bytes >= s.from_bytes) found = &s;
  return found;
}

}  // namespace meshnn::distributed
