// meshnn-kernel-bench's yardsticks (see kernel_bench_machine.hpp).
#include "kernel_bench_machine.hpp"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "meshnn/core/memory.hpp"

namespace meshnn::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best time of fn over at least min_time seconds (and at least 2 runs after one warm-up).
template <class Fn>
double best_time(Fn&& fn, double min_time) {
  return sorted_run_seconds(fn, min_time).front();
}

// Peak FMA throughput of one core: 12 independent accumulator chains (enough to cover latency x
// ports on current x86 cores), FLOPs = chains * lanes * 2 per iteration.
__attribute__((target("avx512f"))) double peak_gflops_avx512() {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  const int64_t iters = 20'000'000;
  const auto t0 = Clock::now();
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  const double t = seconds_since(t0);
  float buf[16], sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_storeu_ps(buf, acc[i]);
    sink += buf[0];
  }
  if (sink == 12345.0f) std::puts("");
  return 12.0 * 16 * 2 * iters / t / 1e9;
}

__attribute__((target("avx2,fma"))) double peak_gflops_avx2() {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  const int64_t iters = 20'000'000;
  const auto t0 = Clock::now();
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  const double t = seconds_since(t0);
  float buf[8], sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_storeu_ps(buf, acc[i]);
    sink += buf[0];
  }
  if (sink == 12345.0f) std::puts("");
  return 12.0 * 8 * 2 * iters / t / 1e9;
}

// The same for vdpbf16ps (AVX512-BF16): 16 lanes x 2 bfloat16 products, each accumulated, so
// 64 FLOPs per instruction. 16 chains: its latency is longer than an FMA's (12 chains reach ~92% of
// what 16 do on Zen 5). Small products (1e-2 x 1e-5) keep the sums normal and finite.
__attribute__((target("avx512bf16,avx512f"))) double peak_gflops_avx512_bf16() {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-2f), _mm512_set1_ps(1e-2f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-5f), _mm512_set1_ps(1e-5f));
  const int64_t iters = 15'000'000;
  const auto t0 = Clock::now();
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  const double t = seconds_since(t0);
  float buf[16], sink = 0;
  for (int i = 0; i < 16; ++i) {
    _mm512_storeu_ps(buf, acc[i]);
    sink += buf[0];
  }
  if (sink == 12345.0f) std::puts("");
  return 16.0 * 64 * iters / t / 1e9;
}

// One pass summing buf with wide loads (4 chains so the adds never limit a memory-bound loop).
__attribute__((target("avx2"))) float sum_buffer(const float* buf, size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(buf + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(buf + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(buf + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(buf + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  return out[0];
}

// A buffer of n floats, all 1, in the memory tensors get (allocate_buffer: huge pages where the
// kernel offers them). The weights that the matmuls stream sit in such memory, and the roof must be
// taken on the same pages: 4 KiB pages read about a quarter slower (docs/performance.md, session 28).
using FloatBuffer = std::unique_ptr<float, void (*)(float*)>;
FloatBuffer ones_buffer(size_t n) {
  FloatBuffer buf(reinterpret_cast<float*>(allocate_buffer(n * sizeof(float))),
                  [](float* p) { release_buffer(reinterpret_cast<std::byte*>(p)); });
  if (!buf) throw std::bad_alloc();
  std::fill_n(buf.get(), n, 1.0f);
  return buf;
}

// One thread streaming a 1 GiB buffer (far beyond any cache).
double read_bandwidth_gbps() {
  const size_t n = (size_t{1} << 30) / sizeof(float);
  const FloatBuffer buf = ones_buffer(n);
  volatile float sink = 0;
  const double t = best_time([&] { sink = sum_buffer(buf.get(), n); }, 1.0);
  (void)sink;
  return static_cast<double>(n * sizeof(float)) / t / 1e9;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

std::unique_ptr<ThreadPool> pinned_pool(int threads) {
  const std::vector<int> cpus = allowed_cpus();
  if (static_cast<int>(cpus.size()) < threads) return std::make_unique<ThreadPool>(threads);
  return std::make_unique<ThreadPool>(threads, std::vector<int>(cpus.begin(), cpus.begin() + threads), kWorkerPollTime);
}

Machine measure_machine() {
  Machine m;
  m.isa = kernels::active_isa();
  // The vdpbf16ps peak whenever the CPU has it (oneDNN uses it even where MESHNN_KERNELS caps ours).
  m.cpu_bf16 = kernels::best_supported_isa() >= kernels::Isa::AVX512_BF16;
  // Best of several runs, spread over about a second: the first ones may meet a core still ramping
  // its clock, and five back to back (a third of a second) all met one busy neighbour once, which
  // put rows at 136% "of the peak" (docs/performance.md, session 33).
  for (int run = 0; run < 9; ++run) {
    if (run > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    m.peak = std::max(m.peak, m.isa >= kernels::Isa::AVX512 ? peak_gflops_avx512()
                              : m.isa == kernels::Isa::AVX2 ? peak_gflops_avx2()
                                                            : peak_gflops_avx2() / 4);  // nominal for the portable path
    if (m.cpu_bf16) m.peak_bf16 = std::max(m.peak_bf16, peak_gflops_avx512_bf16());
  }
  m.bandwidth = read_bandwidth_gbps();
  return m;
}

SharedBandwidth shared_read_bandwidth(ThreadPool& pool) {
  const int threads = pool.num_threads();
  const size_t n = (size_t{512} << 20) / sizeof(float);
  std::vector<FloatBuffer> buffers;
  for (int i = 0; i < threads; ++i) buffers.emplace_back(nullptr, nullptr);
  std::vector<float> sums(static_cast<size_t>(threads));
  // Each worker touches its own buffer first, so its pages sit near the core that reads them.
  pool.parallel_for(threads, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) buffers[static_cast<size_t>(i)] = ones_buffer(n);
  });
  auto pass = [&] {
    pool.parallel_for(threads, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sums[static_cast<size_t>(i)] = sum_buffer(buffers[static_cast<size_t>(i)].get(), n);
    });
  };
  const std::vector<double> seconds = sorted_run_seconds(pass, 1.0, 3);
  const double bytes = static_cast<double>(n * sizeof(float)) * threads;
  return {bytes / seconds.front() / 1e9, bytes / seconds[seconds.size() / 2] / 1e9};
}

}  // namespace meshnn::bench
