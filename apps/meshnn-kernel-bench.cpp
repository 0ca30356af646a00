// meshnn-kernel-bench: matmul GFLOP/s and weight GB/s per weight format, beside OpenBLAS sgemm
// (sgemv for M = 1) on float32 weights of the same shape, and with bfloat16 activations beside
// oneDNN's bfloat16 matmul (bfloat16 weights, float32 output), all measured in the same run.
//
//   meshnn-kernel-bench [--threads 1,2] [--shapes prefill128,decode1,...|MxKxN,...]
//                       [--dtypes float32,bfloat16,bfloat8_b,bfloat4_b] [--act float32|bfloat16]
//                       [--min-time S] [--openblas-threads same|N] [--ceiling] [--json FILE]
//
// The machine's single-core peak FMA rate (for the instruction set the kernels use; on a CPU with
// AVX512-BF16 also the vdpbf16ps rate) and read bandwidth (one thread streaming 1 GiB) are measured
// first; "%peak" is GFLOP/s against the peak of the row's path (the vdpbf16ps peak for rows on our
// avx512-bf16 path, the float32 FMA peak for float32 products; none measured for amx-bf16: "-")
// times threads, "%bw" weight bytes/s against the
// single-core read bandwidth. "path" is the kernel path our matmul takes (matmul_kernel_path).
// OpenBLAS runs with the same number of threads as our row (--openblas-threads N pins it, e.g. 1
// for a single-threaded baseline everywhere). For each shape and weight format, every thread count
// of ours and OpenBLAS run in alternation, round by round; each reports its best time. JSON
// records carry openblas_threads. The bench sets OPENBLAS_THREAD_TIMEOUT and glibc's huge-page
// tunable (unless they are set) and restarts itself, so that OpenBLAS's threads stop spinning
// within a millisecond of a call and the peers' operands get huge pages as ours do
// (set_peer_environment).
// oneDNN (with --act bfloat16, when built with it: apps/kernel_bench_onednn.cpp) runs with our
// row's threads in the same alternation: activations bfloat16 [M,K] row-major, weights rounded to
// bfloat16 and reordered once, outside the timed runs, to the layout the primitive chooses.
// "r_dnnl" = ours / oneDNN; "oneDNN impl" is its implementation (e.g. brg:avx512_core_bf16).
// Rows on our avx512-bf16 or amx-bf16 path also time the same matmul with float32 products (the
// avx512 set) in the alternation and print the bf16 path's speed-up over it.
//
// Worker threads are pinned one per core, as the Runtime pins a rank's workers.
// --ceiling: for every thread count T > 1, also T independent 1-thread matmuls at once, one per
// worker, each on its own 1/T of N (own A packing, own weights, nothing shared, no waiting on one
// another inside the call): what T busy cores of this machine deliver on the same work, measured
// in the same alternation. "of_ceil" = our T-thread rate / that rate.
//
// The options are parsed in kernel_bench_options.cpp, the peaks and bandwidths measured in
// kernel_bench_machine.cpp.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include "kernel_bench_attention.hpp"
#include "kernel_bench_machine.hpp"
#include "kernel_bench_onednn.hpp"
#include "kernel_bench_options.hpp"
#include "meshnn/io/json_output.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/runtime/cli.hpp"
#include "meshnn/core/thread_pool.hpp"
#include "meshnn/tensor/tensor.hpp"

#ifdef MESHNN_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using namespace meshnn;
using bench::BenchOptions;
using bench::BenchShape;
using bench::Machine;
using Clock = std::chrono::steady_clock;

// Whether a kernel path multiplies in bfloat16 (its float32-products twin is then timed too).
bool bf16_products(std::string_view path) { return path == "avx512-bf16" || path == "amx-bf16"; }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The OS cpus this process may run on, in order (the workers are pinned to the first ones).
// K x N weights cut into `parts` column slices on tile boundaries, as the threads of one matmul
// split N: slice t holds tile columns [T*t/parts, T*(t+1)/parts) of the T = ceil(N/32).
std::vector<Tensor> column_slices(const std::vector<float>& w, const BenchShape& s, DataType dtype, int parts) {
  const int64_t tiles = (s.n + 31) / 32;
  std::vector<Tensor> slices;
  for (int t = 0; t < parts; ++t) {
    const int64_t begin = std::min<int64_t>(s.n, tiles * t / parts * 32);
    const int64_t end = std::min<int64_t>(s.n, tiles * (t + 1) / parts * 32);
    const int64_t width = std::max<int64_t>(end - begin, 1);  // a zero-width slice still needs a shape
    std::vector<float> part(static_cast<size_t>(s.k * width), 0.0f);
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t j = begin; j < end; ++j) part[static_cast<size_t>(k * width + j - begin)] = w[static_cast<size_t>(k * s.n + j)];
    slices.push_back(Tensor::from_float(part, Shape{s.k, width}, dtype, Layout::TILE));
  }
  return slices;
}

// One OpenBLAS call on float32 weights of the same shape (sgemv for M = 1, as a decode would).
void openblas_run(const BenchShape& s, const std::vector<float>& a, const std::vector<float>& b,
                  std::vector<float>& c) {
#ifdef MESHNN_HAVE_OPENBLAS
  if (s.m == 1)
    cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(s.k), static_cast<int>(s.n), 1.0f, b.data(),
                static_cast<int>(s.n), a.data(), 1, 0.0f, c.data(), 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                static_cast<int>(s.k), 1.0f, a.data(), static_cast<int>(s.k), b.data(), static_cast<int>(s.n), 0.0f,
                c.data(), static_cast<int>(s.n));
#endif
}

// Best time of each function, all run in alternation (one warm-up each, then rounds until every
// one has had min_time): on a shared machine they all see the same quiet and busy moments. The
// ratios the benchmark reports (ours against OpenBLAS, 2 threads against 1) compare rows measured
// side by side, since one function's own time drifts by more than the differences it is compared
// on over a few seconds (docs/design-measurements.md §15).
// Each run is preceded by an untimed pause. A run repeats the function for at least kMinSample,
// and the pause lasts as long as the run before it, at most kSettle: a 20 us product would
// otherwise spend 1000x its time asleep (a tiny shape's 0.5 s of samples took 25 minutes). After
// a run of `spins_after` (oneDNN's: OpenMP's threads keep spinning for milliseconds after a
// parallel region) the pause is always kSettle: left running, those threads took the core of our
// second worker, and our 2-thread rows of the decode shapes (2-3 ms samples) ran at the 1-thread
// rate in about half the rounds (docs/performance.md, session 27).
std::vector<double> best_times_alternating(const std::vector<std::function<void()>>& fns,
                                           const std::vector<bool>& spins_after, double min_time) {
  constexpr double kSettle = 0.020, kMinSample = 0.002;
  std::vector<int> reps(fns.size(), 1);
  for (size_t i = 0; i < fns.size(); ++i) {
    const auto t0 = Clock::now();
    fns[i]();  // also the warm-up
    reps[i] = static_cast<int>(std::ceil(kMinSample / std::max(seconds_since(t0), 1e-7)));
  }
  std::vector<double> best(fns.size(), 1e30);
  double slowest_total = 0, pause = kSettle;
  for (int rounds = 0; rounds < 3 || slowest_total < min_time; ++rounds) {
    double slowest = 0;
    for (size_t i = 0; i < fns.size(); ++i) {
      std::this_thread::sleep_for(std::chrono::duration<double>(pause));
      const auto t0 = Clock::now();
      for (int r = 0; r < reps[i]; ++r) fns[i]();
      const double sample = seconds_since(t0);
      best[i] = std::min(best[i], sample / reps[i]);
      slowest = std::max(slowest, sample);
      pause = spins_after[i] ? kSettle : std::min(kSettle, sample);
    }
    slowest_total += slowest;
  }
  return best;
}

// `threads` workers pinned one per core to the first allowed cpus (unpinned when there are fewer).
// --bandwidth: one row per thread count. Returns the rows' JSON records.
std::vector<std::string> measure_bandwidths(const BenchOptions& o) {
  std::vector<std::string> records;
  for (int threads : o.thread_counts) {
    const bench::SharedBandwidth bw = bench::shared_read_bandwidth(*bench::pinned_pool(threads));
    fmt::print("read bandwidth, {} core(s) streaming at once: {:.2f} GB/s best, {:.2f} GB/s median pass\n", threads,
               bw.best_gbps, bw.median_gbps);
    records.push_back(nlohmann::ordered_json{{"op", "read_bandwidth"},
                                             {"threads", threads},
                                             {"read_GBps", io::round_to(bw.best_gbps, 3)},
                                             {"read_GBps_median", io::round_to(bw.median_gbps, 3)}}
                          .dump());
  }
  return records;
}

#ifdef MESHNN_HAVE_OPENBLAS
constexpr bool kHaveBlas = true;
#else
constexpr bool kHaveBlas = false;
#endif

void print_header(const BenchOptions& o, const Machine& machine, bool with_onednn) {
  fmt::print("# kernels: {} (small-M walk: {})  single-core peak {:.1f} GFLOP/s{}  "
             "single-core read bandwidth {:.1f} GB/s\n",
             kernels::to_string(machine.isa), kernels::to_string(kernels::small_m_walk()), machine.peak,
             machine.cpu_bf16 ? fmt::format(" float32 FMA, {:.1f} GFLOP/s bfloat16 (vdpbf16ps)", machine.peak_bf16) : "",
             machine.bandwidth);
  fmt::print("# activations {}, output float32; OpenBLAS float32 sgemm (sgemv for M=1) with the same threads\n",
             to_string(o.act));
  if (with_onednn)
    fmt::print("# {}: bfloat16 x bfloat16 -> float32, weights in its chosen layout, with our row's threads\n",
               bench::onednn_description());
  else
    fmt::print("# oneDNN: {}\n",
               bench::onednn_available() ? "measured with --act bfloat16 only" : bench::onednn_description());
  fmt::print("{:<14} {:>5} {:>5} {:>6} {:<10} {:>3} {:<11} {:>9} {:>6} {:>9} {:>6} {:>9} {:>6}{}{}\n", "op", "M", "K",
             "N", "weights", "thr", "path", "GFLOP/s", "%peak", "weightGB/s", "%bw", "OpenBLAS", "ratio",
             with_onednn ? fmt::format(" {:>9} {:>6} {:<{}}", "oneDNN", "r_dnnl", "oneDNN impl", o.ceiling ? 20 : 0) : "",
             o.ceiling ? "   ceiling of_ceil" : "");
}

// The thread pools of the whole run and the OpenBLAS thread counts.
struct Workers {
  std::vector<std::unique_ptr<ThreadPool>> pools;         // one per --threads count
  std::vector<std::unique_ptr<ThreadPool>> inline_pools;  // one per worker, for the ceiling's 1-thread matmuls
  std::vector<int> blas_thread_counts;                    // one pinned count, or each of ours
};

Workers make_workers(const BenchOptions& o) {
  Workers w;
  for (int threads : o.thread_counts) w.pools.push_back(bench::pinned_pool(threads));
  for (int i = 0; i < *std::max_element(o.thread_counts.begin(), o.thread_counts.end()); ++i)
    w.inline_pools.push_back(std::make_unique<ThreadPool>(1));
  if (kHaveBlas) {
    if (o.openblas_threads > 0) w.blas_thread_counts = {o.openblas_threads};
    else w.blas_thread_counts = o.thread_counts;
  }
  return w;
}

// One shape's operands, shared by the rows of every weight format.
struct ShapeOperands {
  BenchShape s;
  std::vector<float> a_values, w_values;
  Tensor a;
  std::vector<float> blas_c;  // OpenBLAS's output, written by its runs
  // oneDNN for each of our thread counts, set up once per shape (the same bfloat16 weights for
  // every weight format: OpenBLAS's float32 weights rounded) and timed beside every format's rows.
  // Null where oneDNN has no such matmul (2.6 has none for bfloat16 below AVX-512).
  std::vector<std::unique_ptr<bench::OnednnMatmul>> onednn;

  ShapeOperands(const BenchOptions& o, const BenchShape& shape, bool with_onednn)
      : s(shape), a_values(random_values(s.m * s.k, 1)), w_values(random_values(s.k * s.n, 2)),
        a(Tensor::from_float(a_values, Shape{s.m, s.k}, o.act, Layout::TILE)), blas_c(static_cast<size_t>(s.m * s.n)) {
    if (with_onednn)
      for (int threads : o.thread_counts) {
        try {
          onednn.push_back(
              std::make_unique<bench::OnednnMatmul>(s.m, s.k, s.n, a_values.data(), w_values.data(), threads));
        } catch (const std::exception& e) {
          fmt::print("# oneDNN, {}x{}x{}, {} thread(s): not measured: {}\n", s.m, s.k, s.n, threads, e.what());
          onednn.push_back(nullptr);
        }
      }
  }
  ShapeOperands(const ShapeOperands&) = delete;  // the runs hold references into it
  ShapeOperands& operator=(const ShapeOperands&) = delete;
};

MatmulOptions float32_output_on(ThreadPool* pool) {
  MatmulOptions opt;
  opt.output_dtype = DataType::FLOAT32;
  opt.pool = pool;
  return opt;
}

// Every run of one weight format, to be timed in one alternation: every thread count of ours,
// then every OpenBLAS and oneDNN thread count, then the float32-product and ceiling runs. Each run
// writes into an output it keeps, as a decode step does (matmul_into).
struct FormatRuns {
  Tensor w;
  // The ceiling's weights: for each multi-thread count, one column slice per worker.
  std::vector<std::vector<Tensor>> slices;
  std::vector<std::function<void()>> fns;
  // Per thread count, the index of its peer's run in fns; 0: none.
  std::vector<size_t> onednn, float32, ceiling;
  std::vector<size_t> openblas;  // the OpenBLAS runs' indices in fns

  FormatRuns(const BenchOptions& o, const Workers& workers, ShapeOperands& x, DataType wd)
      : w(Tensor::from_float(x.w_values, Shape{x.s.k, x.s.n}, wd, Layout::TILE)),
        slices(o.thread_counts.size()),
        onednn(o.thread_counts.size(), 0),
        float32(o.thread_counts.size(), 0),
        ceiling(o.thread_counts.size(), 0) {
    if (o.ceiling)
      for (size_t i = 0; i < o.thread_counts.size(); ++i)
        if (o.thread_counts[i] > 1) slices[i] = column_slices(x.w_values, x.s, wd, o.thread_counts[i]);
    for (const auto& pool : workers.pools)
      fns.push_back([&a = x.a, &weights = w, pool = pool.get(), out = Tensor()]() mutable {
        matmul_into(a, weights, out, false, false, float32_output_on(pool));
      });
    for (int blas_threads : workers.blas_thread_counts) {
      openblas.push_back(fns.size());
      fns.push_back([&x, blas_threads] {
#ifdef MESHNN_HAVE_OPENBLAS
        openblas_set_num_threads(blas_threads);
#endif
        openblas_run(x.s, x.a_values, x.w_values, x.blas_c);
      });
    }
    for (size_t i = 0; i < x.onednn.size(); ++i)
      if (x.onednn[i]) {
        onednn[i] = fns.size();
        fns.push_back([peer = x.onednn[i].get()] { peer->run(); });
      }
    // Where our row takes bfloat16 products, the same call with float32 products (the avx512
    // set: what MESHNN_KERNELS=avx512 runs), so the path's gain is measured in the same run.
    if (bf16_products(matmul_kernel_path(o.act, wd, x.s.m)))
      for (size_t i = 0; i < workers.pools.size(); ++i) {
        float32[i] = fns.size();
        fns.push_back([&a = x.a, &weights = w, pool = workers.pools[i].get(), out = Tensor()]() mutable {
          kernels::set_isa_cap(kernels::Isa::AVX512);
          matmul_into(a, weights, out, false, false, float32_output_on(pool));
          kernels::reset_isa_cap();
        });
      }
    for (size_t i = 0; i < o.thread_counts.size(); ++i) {
      if (slices[i].empty()) continue;
      ceiling[i] = fns.size();
      fns.push_back([&a = x.a, &inline_pools = workers.inline_pools, pool = workers.pools[i].get(), &mine = slices[i],
                     outs = std::vector<Tensor>(slices[i].size())]() mutable {
        pool->run_on_all([&](int t) {
          matmul_into(a, mine[static_cast<size_t>(t)], outs[static_cast<size_t>(t)], false, false,
                      float32_output_on(inline_pools[static_cast<size_t>(t)].get()));
        });
      });
    }
  }
  // Which runs leave threads spinning (best_times_alternating): oneDNN's (OpenMP) and OpenBLAS's
  // (set_peer_environment).
  std::vector<bool> spins_after() const {
    std::vector<bool> spins(fns.size(), false);
    for (size_t index : onednn)
      if (index > 0) spins[index] = true;
    for (size_t index : openblas) spins[index] = true;
    return spins;
  }

  FormatRuns(const FormatRuns&) = delete;  // the runs hold references into it
  FormatRuns& operator=(const FormatRuns&) = delete;
};

// One printed row and JSON record: one weight format at one of our thread counts.
struct Row {
  std::string op;
  const char* path;
  DataType wd;
  int threads, blas_threads;
  double gflops, weight_gbps, blas, ratio, row_peak;
  double onednn_gflops, float32_gflops, ceiling_gflops;  // 0: not measured
  std::string onednn_impl;
};

Row make_row(const BenchOptions& o, const Machine& machine, const ShapeOperands& x, const FormatRuns& runs,
             DataType wd, const std::vector<double>& best, size_t i) {
  const BenchShape& s = x.s;
  const double t = best[i];
  const size_t blas_index = o.openblas_threads > 0 ? 0 : i;
  const double t_blas = kHaveBlas ? best[o.thread_counts.size() + blas_index] : 0.0;
  const double flops = 2.0 * s.m * s.k * s.n;
  Row r;
  r.op = s.m == 1 ? "matmul(gemv)" : "matmul";
  r.path = matmul_kernel_path(o.act, wd, s.m);
  r.wd = wd;
  r.threads = o.thread_counts[i];
  r.blas_threads = o.openblas_threads > 0 ? o.openblas_threads : r.threads;
  r.gflops = flops / t / 1e9;
  r.blas = kHaveBlas ? flops / t_blas / 1e9 : 0.0;
  r.weight_gbps = static_cast<double>(runs.w.size_bytes()) / t / 1e9;
  r.ratio = r.blas > 0 ? r.gflops / r.blas : 0.0;
  r.row_peak = std::string_view(r.path) == "amx-bf16"      ? 0.0
               : std::string_view(r.path) == "avx512-bf16" ? machine.peak_bf16
                                                           : machine.peak;
  r.ceiling_gflops = runs.ceiling[i] > 0 ? flops / best[runs.ceiling[i]] / 1e9 : 0.0;
  r.onednn_gflops = runs.onednn[i] > 0 ? flops / best[runs.onednn[i]] / 1e9 : 0.0;
  r.float32_gflops = runs.float32[i] > 0 ? flops / best[runs.float32[i]] / 1e9 : 0.0;
  r.onednn_impl = runs.onednn[i] > 0 ? x.onednn[i]->impl() : "-";
  return r;
}

void print_row(const BenchShape& s, const Row& r, const Machine& machine, bool with_onednn) {
  fmt::print("{:<14} {:>5} {:>5} {:>6} {:<10} {:>3} {:<11} "
             "{:>9.1f} {:>6} {:>9.2f} {:>5.0f}% {:>9.1f} {:>6.2f}",
             r.op, s.m, s.k, s.n, to_string(r.wd), r.threads, r.path, r.gflops,
             r.row_peak > 0 ? fmt::format("{:.0f}%", 100 * r.gflops / (r.row_peak * r.threads)) : "-",
             r.weight_gbps, 100 * r.weight_gbps / machine.bandwidth, r.blas, r.ratio);
  if (with_onednn)  // the impl padded only where the ceiling's columns follow
    fmt::print(" {:>9} {:>6} {}", r.onednn_gflops > 0 ? fmt::format("{:.1f}", r.onednn_gflops) : "-",
               r.onednn_gflops > 0 ? fmt::format("{:.2f}", r.gflops / r.onednn_gflops) : "-",
               r.ceiling_gflops > 0 ? fmt::format("{:<20}", r.onednn_impl) : r.onednn_impl);
  if (r.ceiling_gflops > 0) fmt::print(" {:>9.1f} {:>7.2f}", r.ceiling_gflops, r.gflops / r.ceiling_gflops);
  if (r.float32_gflops > 0)
    fmt::print("  float32 products {:.1f} GFLOP/s, bf16 x{:.2f}", r.float32_gflops, r.gflops / r.float32_gflops);
  fmt::print("\n");
  std::fflush(stdout);
}

std::string json_record(const BenchOptions& o, const Machine& machine, const BenchShape& s, const Row& r) {
  // Figures to the places that the records in docs/measurements/ have always had; null: not measured.
  using J = nlohmann::ordered_json;
  J record = {{"op", r.op},
              {"M", s.m},
              {"K", s.k},
              {"N", s.n},
              {"weight_dtype", to_string(r.wd)},
              {"threads", r.threads},
              {"gflops", io::round_to(r.gflops, 3)},
              {"weight_GBps", io::round_to(r.weight_gbps, 3)},
              {"openblas_gflops", io::round_to(r.blas, 3)},
              {"ratio", io::round_to(r.ratio, 4)},
              {"openblas_threads", r.blas_threads},
              {"onednn_gflops", r.onednn_gflops > 0 ? J(io::round_to(r.onednn_gflops, 3)) : J()},
              {"onednn_impl", r.onednn_gflops > 0 ? J(r.onednn_impl) : J()},
              {"float32_products_gflops", r.float32_gflops > 0 ? J(io::round_to(r.float32_gflops, 3)) : J()},
              {"activation_dtype", to_string(o.act)},
              {"isa", kernels::to_string(machine.isa)},
              {"path", r.path},
              {"peak_gflops", io::round_to(machine.peak, 1)},
              {"peak_gflops_bf16", machine.cpu_bf16 ? J(io::round_to(machine.peak_bf16, 1)) : J()},
              {"read_GBps", io::round_to(machine.bandwidth, 2)}};
  if (r.ceiling_gflops > 0) record["ceiling_gflops"] = io::round_to(r.ceiling_gflops, 3);
  return record.dump();
}

// One row per shape, weight format and thread count. Returns the rows' JSON records.
std::vector<std::string> measure_matmuls(const BenchOptions& o) {
  const Machine machine = bench::measure_machine();
  // oneDNN is the peer of our bfloat16 path: measured only with bfloat16 activations.
  const bool with_onednn = o.act == DataType::BFLOAT16 && bench::onednn_available();
  print_header(o, machine, with_onednn);
  const Workers workers = make_workers(o);
  std::vector<std::string> records;
  for (const BenchShape& s : o.shapes) {
    ShapeOperands operands(o, s, with_onednn);
    for (DataType wd : o.dtypes) {
      const FormatRuns runs(o, workers, operands, wd);
      const std::vector<double> best = best_times_alternating(runs.fns, runs.spins_after(), o.min_time);
      for (size_t i = 0; i < o.thread_counts.size(); ++i) {
        const Row row = make_row(o, machine, operands, runs, wd, best, i);
        print_row(s, row, machine, with_onednn);
        records.push_back(json_record(o, machine, s, row));
      }
    }
  }
  return records;
}

int bench_main(int argc, char** argv) {
  const BenchOptions o = bench::parse_options(argc, argv);
  // An empty array first: a path that cannot be written fails now rather than after the measuring.
  if (!o.json_path.empty()) io::write_text_file(o.json_path, io::json_array_lines({}));
  const std::vector<std::string> records = o.bandwidth_only      ? measure_bandwidths(o)
                                           : !o.attention.empty() ? bench::measure_attention(o)
                                                                  : measure_matmuls(o);
  if (!o.json_path.empty()) io::write_text_file(o.json_path, io::json_array_lines(records));
  return 0;
}

}  // namespace

// The environment the peers are measured in, set before they are loaded; both are read once, at
// load time, so the bench sets what is missing and starts itself again. A value the user set is kept.
// - OPENBLAS_THREAD_TIMEOUT=20: OpenBLAS's worker threads spin for 2^28 cycles (about 0.1 s)
//   after each call by default, longer than any pause between runs, and a spinning one takes a
//   core from the run after it: oneDNN's 2-thread rows ran at its 1-thread rate in most rounds
//   (docs/performance.md, session 33). 2^20 cycles is under a millisecond, which back-to-back calls
//   inside a timed run still find the threads awake through.
// - GLIBC_TUNABLES=glibc.malloc.hugetlb=1: glibc marks its heap and its large mappings for
//   transparent huge pages, as meshnn's allocator marks every tensor (core/memory.hpp). Without it
//   the peers' operands sit in 4 KiB pages while ours sit in 2 MiB ones; on a virtual machine whose
//   hypervisor shadows the page tables, OpenBLAS's and oneDNN's runs of 128x4544x18176 then ran at
//   a quarter of their speed whenever the alternation held more than two of the large operands
//   (oneDNN 90-280 GFLOP/s against 370-400 alone; docs/performance.md, session 43).
void set_peer_environment(char** argv) {
  bool changed = false;
  for (const auto& [name, value] : {std::pair{"OPENBLAS_THREAD_TIMEOUT", "20"},
                                    std::pair{"GLIBC_TUNABLES", "glibc.malloc.hugetlb=1"}})
    if (std::getenv(name) == nullptr && setenv(name, value, 1) == 0) changed = true;
  if (!changed) return;
  execv("/proc/self/exe", argv);
  fmt::print("# could not restart with the peers' environment set ({}): OpenBLAS's threads may spin into "
             "the runs after it, and the peers' operands sit in 4 KiB pages\n",
             std::strerror(errno));
}

int main(int argc, char** argv) {
  set_peer_environment(argv);
  return run_tool("meshnn-kernel-bench", argc, argv, bench_main);
}
