// A rank's worker threads: its "core grid". One thread per core the rank was bound to, each pinned
// to its core; the calling thread takes part as worker 0, so a 1-thread pool runs inline.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "meshnn/core/function_ref.hpp"

namespace meshnn {

class ThreadPool {
 public:
  // num_threads >= 1. cpu_ids (optional, size num_threads): the OS cpu each worker is pinned to.
  explicit ThreadPool(int num_threads, std::vector<int> cpu_ids = {});
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

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const FunctionRef<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::exception_ptr first_error_;
};

}  // namespace meshnn
