#include "meshnn/distributed/calibrate.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <tuple>
#include <nlohmann/json.hpp>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/distributed/collective_matmul.hpp"
#include "meshnn/distributed/link_calibration.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/tensor/concat.hpp"

namespace meshnn::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// The median of `repeats` runs of fn, each started together on every rank of the mesh and
// counted until the slowest rank is done (what a collective step costs the job). `prepare` runs
// untimed before each.
template <class Prepare, class Fn>
double median_seconds(const MeshDevice& mesh, int repeats, Prepare&& prepare, Fn&& fn, bool warm_up = true) {
  std::vector<double> times;
  prepare();
  if (warm_up) fn();  // buffers, plans, pages
  for (int r = 0; r < repeats; ++r) {
    prepare();
    mesh.synchronize();
    const auto start = Clock::now();
    fn();
    double t = std::chrono::duration<double>(Clock::now() - start).count();
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, mesh.comm());
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <class Fn>
double median_seconds(const MeshDevice& mesh, int repeats, Fn&& fn) {
  return median_seconds(mesh, repeats, [] {}, fn);
}

// The medians of two functions timed in alternation, for a ratio between them: timed one after
// the other, a drift of the machine's speed between the two series showed as a difference.
template <class FnA, class FnB>
std::pair<double, double> median_seconds_alternating(const MeshDevice& mesh, int repeats, FnA&& a, FnB&& b) {
  std::vector<double> ta, tb;
  a();
  b();  // warm-ups
  for (int r = 0; r < repeats; ++r) {
    ta.push_back(median_seconds(mesh, 1, [] {}, a, /*warm_up=*/false));
    tb.push_back(median_seconds(mesh, 1, [] {}, b, /*warm_up=*/false));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

// Rewrites a tensor's storage, as the step before a collective in a plan has just written its
// input: a collective then reads lines a core still holds dirty, not the clean shared copies that
// repeating it on one unchanged tensor leaves behind, which made large all_reduces look much
// cheaper than plans find them (docs/performance.md).
void rewrite(Tensor& t) {
  std::byte* p = t.data<std::byte>();
  for (size_t i = 0; i < t.size_bytes(); i += 64) p[i] = std::byte{0};
}

// The per-step link of a sweep: each size's time over the schedule's steps (a ring all_gather of
// a shard takes n - 1 steps of the shard, an all_reduce 2 (n - 1) steps of 1/n), fitted piecewise
// for the least worst relative error (fit_piecewise_link) in up to three ranges.
AxisFit fit_link(const std::vector<double>& step_bytes, const std::vector<double>& seconds, double steps, int members) {
  std::vector<LinkSample> samples;
  for (size_t i = 0; i < step_bytes.size(); ++i) samples.push_back({step_bytes[i], seconds[i] / steps, 0});
  const PiecewiseLink piecewise = fit_piecewise_link(samples, 3);
  AxisFit fit;
  fit.members = members;
  for (LinkSegment segment : piecewise.segments) {
    // A flat range has no bandwidth to speak of; a tiny positive beta keeps the file's checks simple.
    segment.beta_s_per_byte = std::max(1e-13, segment.beta_s_per_byte);
    if (segment.from_bytes == 0) {
      fit.link.alpha_s = segment.alpha_s;
      fit.link.beta_s_per_byte = segment.beta_s_per_byte;
    } else {
      fit.link.above.push_back(segment);
    }
  }
  for (size_t i = 0; i < step_bytes.size(); ++i) {
    const double predicted = steps * fit.link.seconds(step_bytes[i]);
    fit.max_relative_error = std::max(fit.max_relative_error, std::abs(predicted - seconds[i]) / seconds[i]);
  }
  return fit;
}

// "alpha 4.10 us, 12.3 GB/s; from 1048576 B: alpha ..., ... GB/s"
std::string describe_link(const LinkCost& link) {
  std::string out = fmt::format("alpha {:.2f} us, {:.3f} GB/s", 1e6 * link.alpha_s, 1e-9 / link.beta_s_per_byte);
  for (const LinkSegment& s : link.above)
    out += fmt::format("; from {:.0f} B: alpha {:.2f} us, {:.3f} GB/s", s.from_bytes, 1e6 * s.alpha_s,
                       1e-9 / s.beta_s_per_byte);
  return out;
}

nlohmann::ordered_json segments_json(const std::vector<LinkSegment>& segments) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const LinkSegment& s : segments)
    out.push_back({{"from_bytes", s.from_bytes}, {"alpha_s", s.alpha_s}, {"beta_s_per_byte", s.beta_s_per_byte}});
  return out;
}

// Products (a few ms each) are timed at least this many times: their medians set every plan's
// compute time, and five runs let one slow moment of the machine through.
constexpr int kProductRepeats = 11;

// all_gather_matmul along the first axis of two or more devices: A [n M, K] bfloat16 split on
// rows (M rows each: the last of options.products), B [K, N] bfloat8_b whole; fused (each arrived block's
// product while the next travels) against unfused, and the overlap the model allows.
OverlapFit measure_overlap(const MeshDevicePtr& mesh, const CostModel& model, const CalibrationOptions& options) {
  OverlapFit fit;
  for (int axis : {1, 0})
    if ((axis == 0 ? mesh->num_rows() : mesh->num_cols()) > 1 && fit.axis < 0) fit.axis = axis;
  if (fit.axis < 0) return fit;
  const int n = fit.axis == 0 ? mesh->num_rows() : mesh->num_cols();
  const int64_t m = options.products.back().m, k = options.products.back().k, cols = options.products.back().n;
  Placements rows{Replicate{}, Replicate{}};
  rows[fit.axis] = Shard{0};
  const Tensor block(Shape{m, k}, DataType::BFLOAT16, Layout::TILE);
  const MeshTensor a(mesh, Shape{m * n, k}, rows, block);
  const MeshTensor b(mesh, Shape{k, cols}, {Replicate{}, Replicate{}},
                     Tensor(Shape{k, cols}, DataType::BFLOAT8_B, Layout::TILE));
  CollectiveMatmulOptions fused, unfused;
  unfused.fused = false;
  std::tie(fit.fused_s, fit.unfused_s) =
      median_seconds_alternating(*mesh, std::max(options.repeats, kProductRepeats),
                                 [&] { all_gather_matmul(a, b, 0, fit.axis, fused); },
                                 [&] { all_gather_matmul(a, b, 0, fit.axis, unfused); });
  const double chunk_transfer = model.axis[fit.axis].seconds(static_cast<double>(block.size_bytes()));
  const double chunk_product =
      model.product_seconds(static_cast<double>(m), static_cast<double>(k), static_cast<double>(cols));
  fit.possible_s = (n - 1) * std::min(chunk_transfer, chunk_product);
  fit.product_s = n * chunk_product;
  return fit;
}

}  // namespace

namespace {

// x minimising sum_i (rows[i] . x - 1)^2, by the normal equations with every column scaled to unit
// norm first (the product terms differ by orders of magnitude); nullopt if they are singular.
std::optional<std::vector<double>> fit_to_ones(const std::vector<std::vector<double>>& rows) {
  const size_t n = rows.front().size();
  std::vector<double> norm(n, 0.0);
  for (const auto& r : rows)
    for (size_t j = 0; j < n; ++j) norm[j] += r[j] * r[j];
  for (double& v : norm) v = std::sqrt(v);
  std::vector<std::vector<double>> ata(n, std::vector<double>(n + 1, 0.0));  // [A^T A | A^T 1]
  for (const auto& r : rows)
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) ata[i][j] += r[i] / norm[i] * r[j] / norm[j];
      ata[i][n] += r[i] / norm[i];
    }
  for (size_t i = 0; i < n; ++i) {  // Gauss-Jordan with partial pivoting
    size_t pivot = i;
    for (size_t r = i + 1; r < n; ++r)
      if (std::abs(ata[r][i]) > std::abs(ata[pivot][i])) pivot = r;
    std::swap(ata[i], ata[pivot]);
    if (std::abs(ata[i][i]) < 1e-12) return std::nullopt;
    for (size_t r = 0; r < n; ++r) {
      if (r == i) continue;
      const double f = ata[r][i] / ata[i][i];
      for (size_t c = i; c <= n; ++c) ata[r][c] -= f * ata[i][c];
    }
  }
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = ata[i][n] / ata[i][i] / norm[i];
  return x;
}

}  // namespace

ProductFit fit_product_cost(const std::vector<ProductSample>& samples) {
  MESHNN_CHECK(!samples.empty(), "fit_product_cost: no timed product");
  constexpr size_t kTerms = 4;  // seconds per FLOP, per output, per value of A, per value of B per row block
  auto terms = [](const ProductSample& p) {
    const double m = static_cast<double>(p.m), k = static_cast<double>(p.k), n = static_cast<double>(p.n);
    return std::array<double, kTerms>{2.0 * m * k * n, m * n, m * k,
                                      k * n * static_cast<double>(kernels::gemm_row_blocks(p.m))};
  };
  std::array<double, kTerms> coef{};
  double flops = 0, seconds = 0;
  for (const ProductSample& p : samples) {
    flops += terms(p)[0];
    seconds += p.seconds;
  }
  coef[0] = seconds / flops;  // the rate alone, when nothing better fits
  // Least squares on the relative error (each row divided by its time, target 1) over the active
  // terms; the most negative extra term is dropped until none is negative.
  std::vector<size_t> active = {0, 1, 2, 3};
  while (samples.size() >= active.size()) {
    std::vector<std::vector<double>> rows;
    for (const ProductSample& p : samples) {
      const auto t = terms(p);
      rows.emplace_back();
      for (size_t term : active) rows.back().push_back(t[term] / p.seconds);
    }
    const std::optional<std::vector<double>> x = fit_to_ones(rows);
    if (!x || (*x)[0] <= 0) break;  // no positive rate: keep the rate alone
    size_t worst = 0;  // position in `active` of the most negative extra term, 0 if none
    for (size_t j = 1; j < active.size(); ++j)
      if ((*x)[j] < 0 && (worst == 0 || (*x)[j] < (*x)[worst])) worst = j;
    if (worst == 0) {
      coef = {};
      for (size_t j = 0; j < active.size(); ++j) coef[active[j]] = (*x)[j];
      break;
    }
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(worst));
  }
  ProductFit fit{1.0 / coef[0], coef[1], coef[2], coef[3], 0.0};
  for (const ProductSample& p : samples) {
    const auto t = terms(p);
    double predicted = 0;
    for (size_t i = 0; i < kTerms; ++i) predicted += coef[i] * t[i];
    fit.max_relative_error = std::max(fit.max_relative_error, std::abs(predicted - p.seconds) / p.seconds);
  }
  return fit;
}

std::string Calibration::describe() const {
  std::string out = fmt::format(
      "cost model: local matmul {:.1f} GFLOP/s + {:.2f} ns per output, {:.2f} ns per value of A, {:.2f} ns per value "
      "of B per block of rows (fit within {:.0f}%), local copies {:.1f} GB/s\n",
      model.matmul_flops_per_s / 1e9, 1e9 * model.matmul_s_per_output, 1e9 * model.matmul_s_per_a,
      1e9 * model.matmul_s_per_b, 100 * product.max_relative_error, model.copy_bytes_per_s / 1e9);
  for (int a = 0; a < 2; ++a) {
    if (axis[a].members == 1) {
      out += fmt::format("  axis {}: one device, nothing to measure\n", a);
      continue;
    }
    for (const auto& [what, fit] : {std::pair{"all_gather", &axis[a]}, std::pair{"all_reduce", &reduce_axis[a]}})
      out += fmt::format("  axis {} ({} devices), {} per step: {} (fit within {:.0f}%)\n", a, fit->members, what,
                         describe_link(fit->link), 100 * fit->max_relative_error);
  }
  if (overlap.axis >= 0)
    out += fmt::format("  fused collective matmuls (axis {}): all_gather_matmul fused {:.3f} ms, unfused {:.3f} ms, "
                       "{:.3f} ms could hide: overlap efficiency {:.2f}, fused slowdown {:.3f} of the product\n",
                       overlap.axis, 1e3 * overlap.fused_s, 1e3 * overlap.unfused_s, 1e3 * overlap.possible_s,
                       model.overlap_efficiency, model.fused_slowdown);
  return out;
}

Calibration calibrate(const MeshDevicePtr& mesh, const CalibrationOptions& options) {
  Calibration c;
  for (int axis = 0; axis < 2; ++axis) {
    const int members = axis == 0 ? mesh->num_rows() : mesh->num_cols();
    if (members == 1) continue;
    std::vector<double> gather_step, gather_s, reduce_step, reduce_s;
    for (int64_t size : options.gather_bytes) {
      const int64_t floats = size / 4 / members * members;
      // A [floats] float32 shard per device along this axis (Shard(0) over the axis) to gather, and
      // the same count as partial sums (Partial over the axis) to reduce.
      Placements sharded{Replicate{}, Replicate{}}, partial{Replicate{}, Replicate{}};
      sharded[axis] = Shard{0};
      partial[axis] = Partial{};
      const Tensor local(Shape{floats}, DataType::FLOAT32, Layout::ROW_MAJOR);
      MeshTensor gathered(mesh, Shape{floats * members}, sharded, local), reduced(mesh, Shape{floats}, partial, local);
      gather_step.push_back(static_cast<double>(floats * 4));
      const int repeats = size <= (1 << 18) ? std::max(options.repeats, 25) : options.repeats;
      gather_s.push_back(median_seconds(
          *mesh, repeats, [&] { rewrite(gathered.local()); }, [&] { all_gather(gathered, 0, axis); }));
      reduce_step.push_back(static_cast<double>(floats * 4) / members);
      reduce_s.push_back(median_seconds(
          *mesh, repeats, [&] { rewrite(reduced.local()); }, [&] { all_reduce(reduced, ReduceOp::SUM, axis); }));
    }
    c.axis[axis] = fit_link(gather_step, gather_s, members - 1, members);
    c.reduce_axis[axis] = fit_link(reduce_step, reduce_s, 2.0 * (members - 1), members);
    c.model.axis[axis] = c.axis[axis].link;
    c.model.reduce_axis[axis] = c.reduce_axis[axis].link;
  }
  MESHNN_CHECK(!options.products.empty(), "calibrate: no local product to time");
  std::vector<ProductSample> products;
  for (const CalibrationOptions::Product& p : options.products) {
    const Tensor a(Shape{p.m, p.k}, DataType::BFLOAT16, Layout::TILE);
    const Tensor b(Shape{p.k, p.n}, DataType::BFLOAT8_B, Layout::TILE);
    products.push_back(
        {p.m, p.k, p.n, median_seconds(*mesh, std::max(options.repeats, kProductRepeats), [&] { meshnn::matmul(a, b); })});
  }
  c.product = fit_product_cost(products);
  c.model.matmul_flops_per_s = c.product.flops_per_s;
  c.model.matmul_s_per_output = c.product.s_per_output;
  c.model.matmul_s_per_a = c.product.s_per_a;
  c.model.matmul_s_per_b = c.product.s_per_b;
  // Half of an 8 MiB tensor, cut along whole tiles as redistribute's slices are.
  const Tensor big(Shape{4096, 1024}, DataType::FLOAT32, Layout::TILE);
  const double slice_s = median_seconds(*mesh, options.repeats, [&] { slice(big, 0, 0, 2048); });
  c.model.copy_bytes_per_s = 2048.0 * 1024 * 4 / slice_s;
  c.overlap = measure_overlap(mesh, c.model, options);
  if (c.overlap.axis >= 0) {
    // One measurement, two terms: time saved is overlap, time lost is the fused products' own cost.
    const double saved = c.overlap.unfused_s - c.overlap.fused_s;
    c.model.overlap_efficiency = std::clamp(saved / c.overlap.possible_s, 0.0, 1.0);
    c.model.fused_slowdown = std::max(0.0, -saved / c.overlap.product_s);
  }
  return c;
}

void save_cost_model(const CostModel& model, const std::string& path) {
  nlohmann::ordered_json j;
  for (int a = 0; a < 2; ++a)
    j["axes"].push_back({{"alpha_s", model.axis[a].alpha_s},
                         {"beta_s_per_byte", model.axis[a].beta_s_per_byte},
                         {"above", segments_json(model.axis[a].above)},
                         {"reduce_alpha_s", model.reduce_axis[a].alpha_s},
                         {"reduce_beta_s_per_byte", model.reduce_axis[a].beta_s_per_byte},
                         {"reduce_above", segments_json(model.reduce_axis[a].above)}});
  j["matmul_flops_per_s"] = model.matmul_flops_per_s;
  j["matmul_s_per_output"] = model.matmul_s_per_output;
  j["matmul_s_per_a"] = model.matmul_s_per_a;
  j["matmul_s_per_b"] = model.matmul_s_per_b;
  j["copy_bytes_per_s"] = model.copy_bytes_per_s;
  j["overlap_efficiency"] = model.overlap_efficiency;
  j["fused_slowdown"] = model.fused_slowdown;
  std::ofstream out(path);
  out << j.dump(2) << '\n';
  MESHNN_CHECK(out.good(), "cannot write the cost model to '{}'", path);
}

CostModel load_cost_model(const std::string& path) {
  std::ifstream in(path);
  MESHNN_CHECK(in.good(), "cannot open cost model '{}'", path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  MESHNN_CHECK(!j.is_discarded() && j.is_object(), "cost model '{}' is not a JSON object", path);
  auto positive = [&](const nlohmann::json& o, const char* key) {
    MESHNN_CHECK(o.contains(key) && o[key].is_number() && o[key].get<double>() > 0,
                 "cost model '{}': '{}' must be a positive number", path, key);
    return o[key].get<double>();
  };
  CostModel m;
  MESHNN_CHECK(j.contains("axes") && j["axes"].is_array() && j["axes"].size() == 2,
               "cost model '{}': 'axes' must list the two mesh axes", path);
  for (int a = 0; a < 2; ++a) {
    const nlohmann::json& axis = j["axes"][static_cast<size_t>(a)];
    for (const char* key : {"alpha_s", "reduce_alpha_s"})
      MESHNN_CHECK(axis.contains(key) && axis[key].is_number() && axis[key].get<double>() >= 0,
                   "cost model '{}': axes[{}].{} must be a number >= 0", path, a, key);
    m.axis[a] = {axis["alpha_s"].get<double>(), positive(axis, "beta_s_per_byte"), {}};
    m.reduce_axis[a] = {axis["reduce_alpha_s"].get<double>(), positive(axis, "reduce_beta_s_per_byte"), {}};
    // Further ranges are optional (a file written by hand may have one line per axis).
    for (const auto& [key, link] : {std::pair{"above", &m.axis[a]}, std::pair{"reduce_above", &m.reduce_axis[a]}}) {
      if (!axis.contains(key)) continue;
      MESHNN_CHECK(axis[key].is_array(), "cost model '{}': axes[{}].{} must be a list of ranges", path, a, key);
      double previous = 0;
      for (const nlohmann::json& r : axis[key]) {
        MESHNN_CHECK(r.is_object() && r.contains("alpha_s") && r["alpha_s"].is_number() && r["alpha_s"].get<double>() >= 0,
                     "cost model '{}': each range of axes[{}].{} needs alpha_s >= 0", path, a, key);
        const LinkSegment segment{positive(r, "from_bytes"), r["alpha_s"].get<double>(), positive(r, "beta_s_per_byte")};
        MESHNN_CHECK(segment.from_bytes > previous, "cost model '{}': the ranges of axes[{}].{} must start at rising sizes",
                     path, a, key);
        previous = segment.from_bytes;
        link->above.push_back(segment);
      }
    }
  }
  m.matmul_flops_per_s = positive(j, "matmul_flops_per_s");
  m.copy_bytes_per_s = positive(j, "copy_bytes_per_s");
  if (j.contains("overlap_efficiency")) {  // optional: files from before it existed mean 0
    MESHNN_CHECK(j["overlap_efficiency"].is_number() && j["overlap_efficiency"].get<double>() >= 0 &&
                     j["overlap_efficiency"].get<double>() <= 1,
                 "cost model '{}': 'overlap_efficiency' must be a number from 0 to 1", path);
    m.overlap_efficiency = j["overlap_efficiency"].get<double>();
  }
  // Optional, >= 0: files from before they existed mean 0.
  for (const auto& [key, field] : {std::pair{"fused_slowdown", &m.fused_slowdown},
                                   std::pair{"matmul_s_per_output", &m.matmul_s_per_output},
                                   std::pair{"matmul_s_per_a", &m.matmul_s_per_a},
                                   std::pair{"matmul_s_per_b", &m.matmul_s_per_b}}) {
    if (!j.contains(key)) continue;
    MESHNN_CHECK(j[key].is_number() && j[key].get<double>() >= 0, "cost model '{}': '{}' must be a number >= 0",
                 path, key);
    *field = j[key].get<double>();
  }
  return m;
}

}  // namespace meshnn::distributed
