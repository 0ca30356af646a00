// The piecewise alpha-beta fit of meshnn-calibrate: samples drawn from a known three-regime link
// (a latency floor, an eager range, a rendezvous range) give back its segments and no error; one
// straight line cannot follow them; noise stays within what it adds.
#include <gtest/gtest.h>

#include <cmath>

#include "meshnn/distributed/link_calibration.hpp"

namespace meshnn {
namespace {

using distributed::fit_piecewise_link;
using distributed::LinkSample;
using distributed::PiecewiseLink;

const PiecewiseLink kTruth{{{0, 0.4e-6, 0}, {4096, 3e-6, 1 / 8e9}, {65536, 12e-6, 1 / 20e9}}};

std::vector<LinkSample> samples_of(const PiecewiseLink& link, double noise) {
  std::vector<LinkSample> s;
  int i = 0;
  for (double b = 8; b <= 64.0 * 1024 * 1024; b *= 2, ++i) {
    const double wobble = 1 + noise * ((i % 3) - 1);  // -noise, 0, +noise in turn
    s.push_back({b, link.seconds(b) * wobble, 0});
  }
  return s;
}

double worst(const std::vector<LinkSample>& s, const PiecewiseLink& link) {
  double w = 0;
  for (const LinkSample& x : s) w = std::max(w, std::abs(link.seconds(x.bytes) - x.measured_s) / x.measured_s);
  return w;
}

TEST(LinkFit, RecoversAThreeRegimeLink) {
  const std::vector<LinkSample> s = samples_of(kTruth, 0);
  const PiecewiseLink fit = fit_piecewise_link(s);
  ASSERT_EQ(fit.segments.size(), 3u);
  EXPECT_LT(worst(s, fit), 1e-9);
  EXPECT_DOUBLE_EQ(fit.segments[1].from_bytes, 4096);
  EXPECT_DOUBLE_EQ(fit.segments[2].from_bytes, 65536);
  EXPECT_NEAR(fit.segments[2].beta_s_per_byte * 20e9, 1, 1e-6);
  // One line misses the regimes by far more than the target of the calibration (15%).
  EXPECT_GT(worst(s, fit_piecewise_link(s, 1)), 0.5);
}

TEST(LinkFit, NoiseStaysNoise) {
  // Each range is fitted for its least worst error, so the fit can be no worse than the truth
  // itself, which misses samples scaled by 1 -+ 5% by at most 0.05 / 0.95.
  const std::vector<LinkSample> s = samples_of(kTruth, 0.05);
  EXPECT_LE(worst(s, fit_piecewise_link(s)), 0.05 / 0.95 + 1e-9);
}

}  // namespace
}  // namespace meshnn
