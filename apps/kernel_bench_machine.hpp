// meshnn-kernel-bench's yardsticks: the peak FMA rate of one core and the read bandwidth of one
// core and of several streaming at once, measured on this machine in the same run as the matmuls.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "meshnn/core/thread_pool.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::bench {

// The seconds of each run of fn, sorted, after one warm-up call: at least min_runs runs and at
// least min_time seconds in all. front() is the best run, the middle one the median. before(), if
// given, runs untimed ahead of every timed run (e.g. to empty the caches).
template <class Fn, class Before = void (*)()>
std::vector<double> sorted_run_seconds(Fn&& fn, double min_time, int min_runs = 2, Before&& before = [] {}) {
  using Clock = std::chrono::steady_clock;
  fn();
  std::vector<double> seconds;
  double total = 0;
  while (static_cast<int>(seconds.size()) < min_runs || total < min_time) {
    before();
    const auto t0 = Clock::now();
    fn();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    total += seconds.back();
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

struct Machine {
  kernels::Isa isa = kernels::Isa::PORTABLE;  // the set our kernels use
  bool cpu_bf16 = false;    // the CPU has vdpbf16ps (whatever MESHNN_KERNELS caps ours to)
  double peak = 0;          // single-core GFLOP/s of the float32 FMAs of `isa`
  double peak_bf16 = 0;     // single-core GFLOP/s of vdpbf16ps, when cpu_bf16
  double bandwidth = 0;     // GB/s of one thread streaming 1 GiB
};

// A pool of `threads` workers pinned one per core, on the first cores this process may run on,
// polling between jobs as the jobs' own pool does when each worker owns a core (kWorkerPollTime);
// unpinned and sleeping between jobs when there are fewer cores. A pool that sleeps pays a wake-up
// on every call that the jobs do not pay, which made the 2-thread rows of the short decode-step
// calls look slower than they run in a job (docs/performance.md, session 32).
std::unique_ptr<ThreadPool> pinned_pool(int threads);

// Takes a few seconds: every figure is the best of several runs.
Machine measure_machine();

// `pool`'s workers, one per core, each streaming its own 512 MiB buffer, all at once: the read
// bandwidth that many busy cores share (the roof of a decode step running on them), over about a
// second of passes. The best pass is the roof; the median is what a job running in that second
// met, which differs where a VM's neighbours take part of the memory bandwidth now and then.
struct SharedBandwidth {
  double best_gbps = 0;
  double median_gbps = 0;
};
SharedBandwidth shared_read_bandwidth(ThreadPool& pool);

}  // namespace meshnn::bench
