// Calibrating one mesh axis's point-to-point link: the one-way time of a message of every size from
// 8 B to 64 MiB, measured by ping-pong between the first two devices of each group along the axis
// over meshnn's own transport (what the collectives' steps use), and fitted by a piecewise
// alpha-beta model. One straight line cannot follow a real transport across that range: MPI
// switches protocol (eager to rendezvous, or single-copy) at sizes of its own, caches stop holding
// the message at others, and each regime has its own latency and bandwidth; so the fit cuts the
// sizes into up to four ranges at the breakpoints that minimise the worst relative error, each
// range with its own alpha and beta. A second sweep, which the fit did not see, checks it.
#pragma once

#include <string>
#include <vector>

#include "meshnn/distributed/link_segment.hpp"
#include "meshnn/mesh/mesh_device.hpp"

namespace meshnn::distributed {

// t(bytes) = alpha + bytes * beta of the segment that holds `bytes`.
struct PiecewiseLink {
  std::vector<LinkSegment> segments;  // by from_bytes, the first from 0
  double seconds(double bytes) const;
};

struct LinkSample {
  double bytes = 0, measured_s = 0, predicted_s = 0;
};

struct PointToPointCalibration {
  int axis = 0, members = 1;  // members = 1: nothing measured
  std::string transport;      // a label for people (the MPI transport the run used)
  PiecewiseLink link;
  std::vector<LinkSample> samples;  // the sweep the model was fitted to
  double max_relative_error = 0;    // of the fit over those samples
  // A second sweep measured after the fit, which the model did not see: its worst error is what
  // the model predicts of a message sent later (noise between runs included). Empty: not measured.
  std::vector<LinkSample> check;
  double check_relative_error = 0;
  std::string describe() const;   // the segments and the table of samples
};

// Ranges of the piecewise fit by default. Six: on a steady machine (session 27, Zen 4) four left
// 15-17% between the model and the very sweep it was fitted to (shared memory switches protocol at
// 384 B and 4 KiB, and messages near the L3's size stream at their own rate); six, 8.8-10%.
inline constexpr int kDefaultLinkSegments = 6;

struct PointToPointOptions {
  std::vector<double> bytes;  // sizes to measure; empty: 8 B to 64 MiB, 4 per doubling of 2
  int repeats = 0;            // round trips per batch (a pass takes the median of 3); 0: from the size
  // Passes per sweep; a size's time is their mean without the extremes. Nine, not five: loopback
  // TCP and a shared VM move one size at two speeds from pass to pass, and the means of five
  // passes left the two sweeps apart at single sizes (docs/performance.md, session 29).
  int passes = 9;
  int max_segments = kDefaultLinkSegments;  // ranges of the piecewise fit
  bool check_sweep = true;    // measure a second sweep to check the fit against
  std::string transport = "default";
};

// Collective over the mesh (every rank calls it; each rank gets rank 0's calibration).
PointToPointCalibration calibrate_point_to_point(const MeshDevicePtr& mesh, int axis,
                                                 const PointToPointOptions& options = {});

// The piecewise fit with at most `max_segments` ranges of >= 2 samples each, breakpoints at sample
// sizes, each range's alpha and beta minimising its worst relative error, the breakpoints chosen (dynamic programming)
// for the least worst relative error. Pure (a unit test feeds it synthetic samples).
PiecewiseLink fit_piecewise_link(const std::vector<LinkSample>& samples, int max_segments = kDefaultLinkSegments);

}  // namespace meshnn::distributed
