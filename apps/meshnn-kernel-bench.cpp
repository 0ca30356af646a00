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
// avx512-bf16 path, else the float32 FMA peak) times threads, "%bw" weight bytes/s against the
// single-core read bandwidth. "path" is the kernel path our matmul takes (matmul_kernel_path).
// OpenBLAS runs with the same number of threads as our row (--openblas-threads N pins it, e.g. 1
// for a single-threaded baseline everywhere). For each shape and weight format, every thread count
// of ours and OpenBLAS run in alternation, round by round; each reports its best time. JSON
// records carry openblas_threads.
// oneDNN (with --act bfloat16, when built with it: apps/kernel_bench_onednn.cpp) runs with our
// row's threads in the same alternation: activations bfloat16 [M,K] row-major, weights rounded to
// bfloat16 and reordered once, outside the timed runs, to the layout the primitive chooses.
// "r_dnnl" = ours / oneDNN; "oneDNN impl" is its implementation (e.g. brg:avx512_core_bf16).
// Rows on our avx512-bf16 path also time the same matmul with float32 products (the avx512 set)
// in the alternation and print the bf16 path's speed-up over it.
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
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

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
using bench::BenchShape;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The OS cpus this process may run on, in order (the workers are pinned to the first ones).
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

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
// Each run is followed by an untimed pause: OpenMP's threads (oneDNN's) keep spinning for a while
// after a parallel region, and left running they took the core of our second worker (our 2-thread
// rows then ran at the 1-thread rate). The pause lets them go to sleep before the next run.
std::vector<double> best_times_alternating(const std::vector<std::function<void()>>& fns, double min_time) {
  constexpr auto kSettle = std::chrono::milliseconds(20);
  for (const auto& fn : fns) fn();
  std::vector<double> best(fns.size(), 1e30);
  double slowest_total = 0;
  for (int rounds = 0; rounds < 3 || slowest_total < min_time; ++rounds) {
    double slowest = 0;
    for (size_t i = 0; i < fns.size(); ++i) {
      std::this_thread::sleep_for(kSettle);
      const auto t0 = Clock::now();
      fns[i]();
      const double t = seconds_since(t0);
      best[i] = std::min(best[i], t);
      slowest = std::max(slowest, t);
    }
    slowest_total += slowest;
  }
  return best;
}

int bench_main(int argc, char** argv) {
  const auto [thread_counts, shapes, dtypes, act, json_path, min_time, openblas_threads, ceiling, bandwidth_only] =
      bench::parse_options(argc, argv);
  // An empty array first: a path that cannot be written fails now rather than after the measuring.
  if (!json_path.empty()) io::write_text_file(json_path, io::json_array_lines({}));
  std::vector<std::string> records;  // JSON, one per row
  if (bandwidth_only) {
    const std::vector<int> cpus = allowed_cpus();
    for (int threads : thread_counts) {
      ThreadPool pool(threads, static_cast<int>(cpus.size()) >= threads
                                   ? std::vector<int>(cpus.begin(), cpus.begin() + threads)
                                   : std::vector<int>{});
      const double gbps = bench::shared_read_bandwidth_gbps(pool);
      fmt::print("read bandwidth, {} core(s) streaming at once: {:.2f} GB/s\n", threads, gbps);
      records.push_back(
          nlohmann::ordered_json{{"op", "read_bandwidth"}, {"threads", threads}, {"read_GBps", io::round_to(gbps, 3)}}
              .dump());
    }
    if (!json_path.empty()) io::write_text_file(json_path, io::json_array_lines(records));
    return 0;
  }
  const auto [isa, cpu_bf16, peak, peak_bf16, bandwidth] = bench::measure_machine();
  fmt::print("# kernels: {}  single-core peak {:.1f} GFLOP/s{}  single-core read bandwidth {:.1f} GB/s\n",
             kernels::to_string(isa), peak,
             cpu_bf16 ? fmt::format(" float32 FMA, {:.1f} GFLOP/s bfloat16 (vdpbf16ps)", peak_bf16) : "", bandwidth);
  fmt::print("# activations {}, output float32; OpenBLAS float32 sgemm (sgemv for M=1) with the same threads\n",
             to_string(act));
  // oneDNN is the peer of our bfloat16 path: measured only with bfloat16 activations.
  const bool with_onednn = act == DataType::BFLOAT16 && bench::onednn_available();
  if (with_onednn)
    fmt::print("# {}: bfloat16 x bfloat16 -> float32, weights in its chosen layout, with our row's threads\n",
               bench::onednn_description());
  else
    fmt::print("# oneDNN: {}\n",
               bench::onednn_available() ? "measured with --act bfloat16 only" : bench::onednn_description());
  fmt::print("{:<14} {:>5} {:>5} {:>6} {:<10} {:>3} {:<11} {:>9} {:>6} {:>9} {:>6} {:>9} {:>6}{}{}\n", "op", "M", "K",
             "N", "weights", "thr", "path", "GFLOP/s", "%peak", "weightGB/s", "%bw", "OpenBLAS", "ratio",
             with_onednn ? fmt::format(" {:>9} {:>6} {:<{}}", "oneDNN", "r_dnnl", "oneDNN impl", ceiling ? 20 : 0) : "",
             ceiling ? "   ceiling of_ceil" : "");

#ifdef MESHNN_HAVE_OPENBLAS
  constexpr bool kHaveBlas = true;
#else
  constexpr bool kHaveBlas = false;
#endif
  const std::vector<int> cpus = allowed_cpus();
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int threads : thread_counts)
    pools.push_back(std::make_unique<ThreadPool>(
        threads, static_cast<int>(cpus.size()) >= threads ? std::vector<int>(cpus.begin(), cpus.begin() + threads)
                                                          : std::vector<int>{}));
  // One inline pool per worker for the ceiling's independent 1-thread matmuls.
  std::vector<std::unique_ptr<ThreadPool>> inline_pools;
  for (int i = 0; i < *std::max_element(thread_counts.begin(), thread_counts.end()); ++i)
    inline_pools.push_back(std::make_unique<ThreadPool>(1));
  // OpenBLAS thread counts to measure: one pinned count, or each of ours.
  std::vector<int> blas_thread_counts;
  if (kHaveBlas) {
    if (openblas_threads > 0) blas_thread_counts = {openblas_threads};
    else blas_thread_counts = thread_counts;
  }
  for (const BenchShape& s : shapes) {
    const std::vector<float> a_values = random_values(s.m * s.k, 1), w_values = random_values(s.k * s.n, 2);
    const Tensor a = Tensor::from_float(a_values, Shape{s.m, s.k}, act, Layout::TILE);
    std::vector<float> blas_c(static_cast<size_t>(s.m * s.n));
    // oneDNN for each of our thread counts, set up once per shape (the same bfloat16 weights for
    // every weight format: OpenBLAS's float32 weights rounded) and timed beside every format's rows.
    // Null where oneDNN has no such matmul (2.6 has none for bfloat16 below AVX-512).
    std::vector<std::unique_ptr<bench::OnednnMatmul>> onednn;
    if (with_onednn)
      for (int threads : thread_counts) {
        try {
          onednn.push_back(
              std::make_unique<bench::OnednnMatmul>(s.m, s.k, s.n, a_values.data(), w_values.data(), threads));
        } catch (const std::exception& e) {
          fmt::print("# oneDNN, {}x{}x{}, {} thread(s): not measured: {}\n", s.m, s.k, s.n, threads, e.what());
          onednn.push_back(nullptr);
        }
      }
    for (DataType wd : dtypes) {
      const Tensor w = Tensor::from_float(w_values, Shape{s.k, s.n}, wd, Layout::TILE);
      // The ceiling's weights: for each multi-thread count, one column slice per worker.
      std::vector<std::vector<Tensor>> slices(thread_counts.size());
      if (ceiling)
        for (size_t i = 0; i < thread_counts.size(); ++i)
          if (thread_counts[i] > 1) slices[i] = column_slices(w_values, s, wd, thread_counts[i]);
      // Every thread count of ours, then every OpenBLAS and oneDNN thread count, in one alternation.
      // Each run writes into an output it keeps, as a decode step does (matmul_into).
      std::vector<std::function<void()>> runs;
      for (const auto& pool : pools)
        runs.push_back([&a, &w, pool = pool.get(), out = Tensor()]() mutable {
          MatmulOptions opt;
          opt.output_dtype = DataType::FLOAT32;
          opt.pool = pool;
          matmul_into(a, w, out, false, false, opt);
        });
      for (int blas_threads : blas_thread_counts)
        runs.push_back([&, blas_threads] {
#ifdef MESHNN_HAVE_OPENBLAS
          openblas_set_num_threads(blas_threads);
#endif
          openblas_run(s, a_values, w_values, blas_c);
        });
      std::vector<size_t> onednn_run(thread_counts.size(), 0);  // 0: none
      for (size_t i = 0; i < onednn.size(); ++i)
        if (onednn[i]) {
          onednn_run[i] = runs.size();
          runs.push_back([peer = onednn[i].get()] { peer->run(); });
        }
      // Where our row takes bfloat16 products, the same call with float32 products (the avx512
      // set: what MESHNN_KERNELS=avx512 runs), so the path's gain is measured in the same run.
      const bool bf16_row = std::string_view(matmul_kernel_path(act, wd, s.m)) == "avx512-bf16";
      std::vector<size_t> float32_run(thread_counts.size(), 0);  // 0: none
      if (bf16_row)
        for (size_t i = 0; i < pools.size(); ++i) {
          float32_run[i] = runs.size();
          runs.push_back([&a, &w, pool = pools[i].get(), out = Tensor()]() mutable {
            MatmulOptions opt;
            opt.output_dtype = DataType::FLOAT32;
            opt.pool = pool;
            kernels::set_isa_cap(kernels::Isa::AVX512);
            matmul_into(a, w, out, false, false, opt);
            kernels::reset_isa_cap();
          });
        }
      std::vector<size_t> ceiling_run(thread_counts.size(), 0);
      for (size_t i = 0; i < thread_counts.size(); ++i) {
        if (slices[i].empty()) continue;
        ceiling_run[i] = runs.size();
        runs.push_back([&a, &inline_pools, pool = pools[i].get(), &mine = slices[i],
                        outs = std::vector<Tensor>(slices[i].size())]() mutable {
          pool->run_on_all([&](int t) {
            MatmulOptions opt;
            opt.output_dtype = DataType::FLOAT32;
            opt.pool = inline_pools[static_cast<size_t>(t)].get();
            matmul_into(a, mine[static_cast<size_t>(t)], outs[static_cast<size_t>(t)], false, false, opt);
          });
        });
      }

      const std::vector<double> best = best_times_alternating(runs, min_time);
      for (size_t i = 0; i < thread_counts.size(); ++i) {
        const int threads = thread_counts[i];
        const double t = best[i];
        const size_t blas_index = openblas_threads > 0 ? 0 : i;
        const double t_blas = kHaveBlas ? best[thread_counts.size() + blas_index] : 0.0;
        const double flops = 2.0 * s.m * s.k * s.n;
        const double gflops = flops / t / 1e9;
        const double blas = kHaveBlas ? flops / t_blas / 1e9 : 0.0;
        const double weight_gbps = static_cast<double>(w.size_bytes()) / t / 1e9;
        const double ratio = blas > 0 ? gflops / blas : 0.0;
        const double ceiling_gflops = ceiling_run[i] > 0 ? flops / best[ceiling_run[i]] / 1e9 : 0.0;
        const double onednn_gflops = onednn_run[i] > 0 ? flops / best[onednn_run[i]] / 1e9 : 0.0;  // 0: not measured
        const double float32_gflops = float32_run[i] > 0 ? flops / best[float32_run[i]] / 1e9 : 0.0;  // 0: not measured
        const std::string onednn_impl = onednn_run[i] > 0 ? onednn[i]->impl() : "-";
        const std::string op = s.m == 1 ? "matmul(gemv)" : "matmul";
        const char* path = matmul_kernel_path(act, wd, s.m);
        const double row_peak = std::string_view(path) == "avx512-bf16" ? peak_bf16 : peak;
        fmt::print("{:<14} {:>5} {:>5} {:>6} {:<10} {:>3} {:<11} "
                   "{:>9.1f} {:>5.0f}% {:>9.2f} {:>5.0f}% {:>9.1f} {:>6.2f}",
                   op, s.m, s.k, s.n, to_string(wd), threads, path, gflops, 100 * gflops / (row_peak * threads),
                   weight_gbps, 100 * weight_gbps / bandwidth, blas, ratio);
        if (with_onednn)  // the impl padded only where the ceiling's columns follow
          fmt::print(" {:>9} {:>6} {}", onednn_gflops > 0 ? fmt::format("{:.1f}", onednn_gflops) : "-",
                     onednn_gflops > 0 ? fmt::format("{:.2f}", gflops / onednn_gflops) : "-",
                     ceiling_gflops > 0 ? fmt::format("{:<20}", onednn_impl) : onednn_impl);
        if (ceiling_gflops > 0) fmt::print(" {:>9.1f} {:>7.2f}", ceiling_gflops, gflops / ceiling_gflops);
        if (float32_gflops > 0) fmt::print("  float32 products {:.1f} GFLOP/s, bf16 x{:.2f}", float32_gflops, gflops / float32_gflops);
        fmt::print("\n");
        std::fflush(stdout);
        // Figures to the places that the records in docs/measurements/ have always had; null: not measured.
        using J = nlohmann::ordered_json;
        J record = {{"op", op},
                    {"M", s.m},
                    {"K", s.k},
                    {"N", s.n},
                    {"weight_dtype", to_string(wd)},
                    {"threads", threads},
                    {"gflops", io::round_to(gflops, 3)},
                    {"weight_GBps", io::round_to(weight_gbps, 3)},
                    {"openblas_gflops", io::round_to(blas, 3)},
                    {"ratio", io::round_to(ratio, 4)},
                    {"openblas_threads", openblas_threads > 0 ? openblas_threads : threads},
                    {"onednn_gflops", onednn_gflops > 0 ? J(io::round_to(onednn_gflops, 3)) : J()},
                    {"onednn_impl", onednn_gflops > 0 ? J(onednn_impl) : J()},
                    {"float32_products_gflops", float32_gflops > 0 ? J(io::round_to(float32_gflops, 3)) : J()},
                    {"activation_dtype", to_string(act)},
                    {"isa", kernels::to_string(isa)},
                    {"path", path},
                    {"peak_gflops", io::round_to(peak, 1)},
                    {"peak_gflops_bf16", cpu_bf16 ? J(io::round_to(peak_bf16, 1)) : J()},
                    {"read_GBps", io::round_to(bandwidth, 2)}};
        if (ceiling_gflops > 0) record["ceiling_gflops"] = io::round_to(ceiling_gflops, 3);
        records.push_back(record.dump());
      }
    }
  }
  if (!json_path.empty()) io::write_text_file(json_path, io::json_array_lines(records));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool("meshnn-kernel-bench", argc, argv, bench_main); }
