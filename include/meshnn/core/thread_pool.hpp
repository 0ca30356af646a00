// A rank's worker threads: its "core grid". One thread per core the rank was bound to, each pinned
// to its core; the calling thread takes part as worker 0, so a 1-thread pool runs inline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "meshnn/core/function_ref.hpp"

namespace meshnn {

// How long a pool whose workers own their cores polls before sleeping (ThreadPool's spin): longer
// than the gaps between a decode step's parallel ops, short enough that an idle rank soon stops
// using its cores.
inline constexpr std::chrono::microseconds kWorkerPollTime{200};

class ThreadPool {
 public:
  // num_threads >= 1. cpu_ids (optional, size num_threads): the OS cpu each worker is pinned to.
  // The calling thread, worker 0, is not pinned; a job that finds it on another worker's cpu moves
  // it to cpu_ids[0] first, and leaves its cpu set as it was.
  // spin: how long a worker waiting for the next job, and the caller waiting for the workers to
  // finish, poll before they sleep on a condition variable. Waking a sleeping thread took 40-80 us
  // on the 2-core VM (docs/performance.md), more than many decode-step ops take; polling costs a
  // core, so only a pool whose workers each own a core should spin (the Runtime's, unless ranks
  // share cores). 0: sleep at once.
  explicit ThreadPool(int num_threads, std::vector<int> cpu_ids = {},
                      std::chrono::microseconds spin = std::chrono::microseconds{0});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, count) into num_threads contiguous ranges (as equal as possible) and calls
  // fn(begin, end, thread_index) for each non-empty one; returns when all are done. The first
  // exception thrown by any worker is rethrown here. Not reentrant.
  void parallel_for(int64_t count, FunctionRef<void(int64_t, int64_t, int)> fn);

  // Calls fn(thread_index) once on every worker.
  void run_on_all(FunctionRef<void(int)> fn);

 private:
  void worker_loop(int index);

  // Polls `done` for up to spin_; whether it became true.
  template <class Done>
  bool spin_until(Done done) const;

  // Moves the calling thread off a core that another worker is pinned to (see run_on_all).
  void leave_workers_cores() const;

  int num_threads_;
  std::vector<int> cpu_ids_;
  std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  // generation_ and pending_ are read without the mutex by polling threads and written under it,
  // so that a thread asleep on a condition variable never misses a change.
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const FunctionRef<void(int)>* job_ = nullptr;  // written before generation_ moves on
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stopping_ = false;
  std::exception_ptr first_error_;
};

}  // namespace meshnn
