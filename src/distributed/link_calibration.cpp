#include "meshnn/distributed/link_calibration.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/ccl/transport.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"

namespace meshnn::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// The worst relative error of alpha + beta x over samples [begin, end) at this beta with the best
// alpha >= 0: alpha must lie within e * y_i of c_i = y_i - beta x_i for every i, which is possible
// when e >= (c_i - c_j) / (y_i + y_j) for every pair and e >= -c_j / y_j (alpha >= 0). Returns e
// and sets alpha to the lowest admissible value.
double minimax_error_at(const std::vector<LinkSample>& s, size_t begin, size_t end, double beta, double& alpha) {
  double e = 0;
  for (size_t i = begin; i < end; ++i) {
    const double ci = s[i].measured_s - beta * s[i].bytes;
    e = std::max(e, -ci / s[i].measured_s);
    for (size_t j = begin; j < end; ++j) {
      const double cj = s[j].measured_s - beta * s[j].bytes;
      e = std::max(e, (ci - cj) / (s[i].measured_s + s[j].measured_s));
    }
  }
  alpha = 0;
  for (size_t i = begin; i < end; ++i)
    alpha = std::max(alpha, s[i].measured_s - beta * s[i].bytes - e * s[i].measured_s);
  return e;
}

// alpha >= 0 and beta >= 0 minimising the worst relative error over samples [begin, end) (a
// Chebyshev fit: the calibration's target is a worst error, and least squares lets one size of a
// range stray to keep the others close). The error is a maximum of functions linear in beta, so
// convex: a ternary search over beta finds its minimum.
LinkSegment fit_segment(const std::vector<LinkSample>& s, size_t begin, size_t end) {
  double beta_high = 0;
  for (size_t i = begin; i < end; ++i) beta_high = std::max(beta_high, 2 * s[i].measured_s / s[i].bytes);
  double lo = 0, hi = beta_high, alpha = 0;
  for (int iteration = 0; iteration < 200 && hi > lo; ++iteration) {
    const double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
    if (minimax_error_at(s, begin, end, m1, alpha) <= minimax_error_at(s, begin, end, m2, alpha)) hi = m2;
    else lo = m1;
  }
  LinkSegment seg;
  seg.from_bytes = begin == 0 ? 0 : s[begin].bytes;
  seg.beta_s_per_byte = (lo + hi) / 2;
  minimax_error_at(s, begin, end, seg.beta_s_per_byte, seg.alpha_s);
  return seg;
}

double worst_error(const std::vector<LinkSample>& s, const PiecewiseLink& link) {
  double worst = 0;
  for (const LinkSample& x : s) worst = std::max(worst, std::abs(link.seconds(x.bytes) - x.measured_s) / x.measured_s);
  return worst;
}

// One-way seconds of `bytes`, from round trips between positions 0 and 1 (the others wait).
double one_way_seconds(ccl::Transport& t, int tag, std::byte* buffer, size_t bytes, int round_trips) {
  auto wait = [&](int request) {
    while (!t.test(request)) {
    }
  };
  auto round_trip = [&] {
    if (t.position() == 0) {
      wait(t.post_send(1, tag, buffer, bytes));
      wait(t.post_recv(1, tag, buffer, bytes));
    } else {
      wait(t.post_recv(0, tag, buffer, bytes));
      wait(t.post_send(0, tag, buffer, bytes));
    }
  };
  round_trip();  // warm-up: pages, MPI's connection and registration
  std::vector<double> batches;
  for (int b = 0; b < 3; ++b) {
    const auto start = Clock::now();
    for (int r = 0; r < round_trips; ++r) round_trip();
    batches.push_back(std::chrono::duration<double>(Clock::now() - start).count() / (2.0 * round_trips));
  }
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

// The mean of the passes without the fastest and the slowest one (when there are three or more).
// Not the median: a transport can move one size at two speeds from pass to pass (TCP on loopback
// does, docs/performance.md), and the median of a few passes then lands on either while the mean
// estimates what a message costs on average, which is what the planner adds up; dropping the
// extremes keeps a single disturbed pass out.
double trimmed_mean(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t drop = values.size() >= 3 ? 1 : 0;
  double sum = 0;
  for (size_t i = drop; i + drop < values.size(); ++i) sum += values[i];
  return sum / static_cast<double>(values.size() - 2 * drop);
}

std::vector<double> default_sizes() {
  std::vector<double> sizes;
  for (double b = 8; b <= 64.0 * 1024 * 1024; b *= 2) {
    sizes.push_back(b);
    if (b * 1.5 < 64.0 * 1024 * 1024) sizes.push_back(b * 1.5);
  }
  return sizes;
}

}  // namespace

double PiecewiseLink::seconds(double bytes) const {
  const LinkSegment* seg = segment_for(segments, bytes);  // the first range starts at 0
  if (seg == nullptr) seg = &segments.front();
  return seg->alpha_s + bytes * seg->beta_s_per_byte;
}

PiecewiseLink fit_piecewise_link(const std::vector<LinkSample>& samples_in, int max_segments) {
  MESHNN_CHECK(samples_in.size() >= 2, "a link fit needs at least 2 samples, got {}", samples_in.size());
  MESHNN_CHECK(max_segments >= 1, "a link fit needs at least one segment, got {}", max_segments);
  std::vector<LinkSample> s = samples_in;
  std::sort(s.begin(), s.end(), [](const LinkSample& a, const LinkSample& b) { return a.bytes < b.bytes; });
  const size_t n = s.size();
  // The worst relative error of one range [i, j) fitted alone (ranges of >= 2 samples).
  auto range_error = [&](size_t i, size_t j) {
    const PiecewiseLink one{{fit_segment(s, i, j)}};
    double worst = 0;
    for (size_t x = i; x < j; ++x)
      worst = std::max(worst, std::abs(one.seconds(s[x].bytes) - s[x].measured_s) / s[x].measured_s);
    return worst;
  };
  std::vector<std::vector<double>> err(n + 1, std::vector<double>(n + 1, INFINITY));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 2; j <= n; ++j) err[i][j] = range_error(i, j);
  // best[k][j]: the least worst error of the first j samples cut into k ranges; cut[k][j] where
  // the last of them starts (the breakpoints that minimise the worst error, by dynamic programming).
  const size_t segments = static_cast<size_t>(max_segments);
  std::vector<std::vector<double>> best(segments + 1, std::vector<double>(n + 1, INFINITY));
  std::vector<std::vector<size_t>> cut(segments + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= segments; ++k)
    for (size_t j = 2; j <= n; ++j)
      for (size_t i = 0; i + 2 <= j; ++i) {
        const double e = std::max(best[k - 1][i], err[i][j]);
        if (e < best[k][j]) best[k][j] = e, cut[k][j] = i;
      }
  // More ranges only when they lower the worst error by a tenth of a percentage point or more:
  // less is rounding, and a range fitted to it would be fitted to noise.
  constexpr double kWorthARange = 1e-3;
  size_t k_best = 1;
  for (size_t k = 2; k <= segments; ++k)
    if (best[k][n] < best[k_best][n] - kWorthARange) k_best = k;
  std::vector<size_t> starts;
  for (size_t k = k_best, j = n; k > 0; j = cut[k][j], --k) starts.push_back(cut[k][j]);
  std::reverse(starts.begin(), starts.end());
  PiecewiseLink link;
  for (size_t r = 0; r < starts.size(); ++r)
    link.segments.push_back(fit_segment(s, starts[r], r + 1 < starts.size() ? starts[r + 1] : n));
  return link;
}

std::string PointToPointCalibration::describe() const {
  if (members == 1) return fmt::format("axis {}: one device, nothing to measure\n", axis);
  std::string out = fmt::format("axis {} ({} devices, {}): point-to-point, one way, fit within {:.1f}%", axis,
                                members, transport, 100 * max_relative_error);
  if (!check.empty()) out += fmt::format(", a second sweep within {:.1f}%", 100 * check_relative_error);
  out += "\n";
  for (const LinkSegment& s : link.segments)
    out += fmt::format("  from {:>10.0f} B: alpha {:8.3f} us, {:8.3f} GB/s\n", s.from_bytes, 1e6 * s.alpha_s,
                       s.beta_s_per_byte > 0 ? 1e-9 / s.beta_s_per_byte : INFINITY);
  out += fmt::format("  {:>10} {:>12} {:>12} {:>8}", "bytes", "measured us", "model us", "error");
  if (!check.empty()) out += fmt::format(" {:>12} {:>8}", "again us", "error");
  out += "\n";
  for (size_t i = 0; i < samples.size(); ++i) {
    const LinkSample& x = samples[i];
    out += fmt::format("  {:>10.0f} {:>12.3f} {:>12.3f} {:>7.1f}%", x.bytes, 1e6 * x.measured_s, 1e6 * x.predicted_s,
                       100 * (x.predicted_s - x.measured_s) / x.measured_s);
    if (i < check.size())
      out += fmt::format(" {:>12.3f} {:>7.1f}%", 1e6 * check[i].measured_s,
                         100 * (check[i].predicted_s - check[i].measured_s) / check[i].measured_s);
    out += "\n";
  }
  return out;
}

PointToPointCalibration calibrate_point_to_point(const MeshDevicePtr& mesh, int axis, const PointToPointOptions& options) {
  MESHNN_CHECK(axis == 0 || axis == 1, "calibrate_point_to_point: mesh axis must be 0 or 1, got {}", axis);
  PointToPointCalibration c;
  c.axis = axis;
  c.members = axis == 0 ? mesh->num_rows() : mesh->num_cols();
  c.transport = options.transport;
  if (c.members == 1) return c;
  const std::vector<double> sizes = options.bytes.empty() ? default_sizes() : options.bytes;
  for (double b : sizes) MESHNN_CHECK(b >= 1 && b <= double(1 << 30), "calibrate_point_to_point: size {} B is out of 1 B..1 GiB", b);
  MESHNN_CHECK(options.passes >= 1, "calibrate_point_to_point: passes must be >= 1, got {}", options.passes);
  const size_t largest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  ccl::MpiTransport transport(mesh->axis_comm(axis), mesh->axis_transport_kind(axis));
  const bool pinging = transport.position() < 2;
  // The memory tensors use (core/memory.hpp), so transfers meet the pages collectives meet.
  std::unique_ptr<std::byte, void (*)(std::byte*)> buffer(allocate_buffer(largest), release_buffer);
  // Two sweeps over the sizes, rank 0's one-way times for every rank (so that all fit one model):
  // the one the model is fitted to and the check, which the fit does not see. Each size's time in
  // a sweep is the trimmed mean of `passes` passes over all sizes, in alternating order of size.
  // The two sweeps' batches of a size are measured back to back, in turns of which goes first: a
  // drift of the machine's speed (a shared VM's lasts seconds) then meets both alike, and the
  // check measures what the model predicts of a message sent at that moment. With whole passes
  // taking turns instead, a slow stretch covering two passes of one sweep and one of the other
  // (trimmed away) made every size of the check faster than the fit (docs/performance.md).
  const int sweeps = options.check_sweep ? 2 : 1;
  std::vector<std::vector<std::vector<double>>> seconds(sweeps, std::vector<std::vector<double>>(sizes.size()));
  for (int pass = 0; pass < options.passes; ++pass)
    for (size_t n = 0; n < sizes.size(); ++n) {
      const size_t i = pass % 2 == 0 ? n : sizes.size() - 1 - n;
      const double b = sizes[i];
      // About 20 ms of round trips per batch at 10 GB/s, between 10 and 1000.
      const int round_trips =
          options.repeats > 0 ? options.repeats : std::clamp(static_cast<int>(1e8 / (b + 1e4)), 10, 1000);
      for (int turn = 0; turn < sweeps; ++turn) {
        const int sweep = (turn + pass + static_cast<int>(n)) % sweeps;
        const int tag = ccl::tag_base_for(mesh->next_operation_id(), transport);
        mesh->synchronize();
        seconds[sweep][i].push_back(
            pinging ? one_way_seconds(transport, tag, buffer.get(), static_cast<size_t>(b), round_trips) : 0);
      }
    }
  auto samples_of_sweep = [&](const std::vector<std::vector<double>>& passes) {
    std::vector<double> means;
    for (const std::vector<double>& s : passes) means.push_back(trimmed_mean(s));
    MPI_Bcast(means.data(), static_cast<int>(means.size()), MPI_DOUBLE, 0, mesh->comm());
    std::vector<LinkSample> samples;
    for (size_t i = 0; i < sizes.size(); ++i) samples.push_back({sizes[i], means[i], 0});
    std::sort(samples.begin(), samples.end(), [](const LinkSample& a, const LinkSample& b) { return a.bytes < b.bytes; });
    return samples;
  };
  c.samples = samples_of_sweep(seconds[0]);
  c.link = fit_piecewise_link(c.samples, options.max_segments);
  for (LinkSample& x : c.samples) x.predicted_s = c.link.seconds(x.bytes);
  c.max_relative_error = worst_error(c.samples, c.link);
  if (options.check_sweep) {
    c.check = samples_of_sweep(seconds[1]);
    for (LinkSample& x : c.check) x.predicted_s = c.link.seconds(x.bytes);
    c.check_relative_error = worst_error(c.check, c.link);
  }
  return c;
}

}  // namespace meshnn::distributed
