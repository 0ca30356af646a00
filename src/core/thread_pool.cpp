#include "meshnn/core/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <string>

#include "meshnn/core/error.hpp"
#include "meshnn/core/trace.hpp"

namespace meshnn {
namespace {

void pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  // Best effort: a cpu outside the allowed set (containers) leaves the thread where it was.
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, std::vector<int> cpu_ids, std::chrono::microseconds spin)
    : num_threads_(num_threads), cpu_ids_(cpu_ids), spin_(spin) {
  MESHNN_CHECK(num_threads >= 1, "a thread pool needs at least one thread, got {}", num_threads);
  MESHNN_CHECK(cpu_ids.empty() || static_cast<int>(cpu_ids.size()) == num_threads,
               "thread pool of {} threads given {} cpu ids", num_threads, cpu_ids.size());
  // Worker 0 is the calling thread (it stays on the rank's whole core set); the others get one
  // core each so that two busy workers never share a core.
  for (int i = 1; i < num_threads; ++i) {
    const int cpu = cpu_ids.empty() ? -1 : cpu_ids[static_cast<size_t>(i)];
    workers_.emplace_back([this, i, cpu] {
      if (cpu >= 0) pin_current_thread(cpu);
      worker_loop(i);
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    job_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);  // polling workers see it too
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

template <class Done>
bool ThreadPool::spin_until(Done done) const {
  if (spin_.count() <= 0) return done();
  const auto deadline = std::chrono::steady_clock::now() + spin_;
  for (int i = 1;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

void ThreadPool::worker_loop(int index) {
  trace::name_this_thread("worker " + std::to_string(index));
  uint64_t seen = 0;
  for (;;) {
    const FunctionRef<void(int)>* job = nullptr;
    if (spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      // job_ was written before generation_ moved on (release), and stays until every worker is done.
      seen = generation_.load(std::memory_order_acquire);
      job = job_;
    } else {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });
      if (stopping_) return;
      seen = generation_.load();
      job = job_;
    }
    if (job == nullptr) return;  // the destructor's wake-up (generation_ moves on with no job)
    std::exception_ptr error;
    try {
      (*job)(index);
    } catch (...) {
      error = std::current_exception();
    }
    if (error) {
      std::lock_guard lock(mutex_);
      if (!first_error_) first_error_ = error;
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the mutex, so that a caller between its check of pending_ and its sleep cannot miss it.
      std::lock_guard lock(mutex_);
      work_done_.notify_one();
    }
  }
}

void ThreadPool::leave_workers_cores() const {
  const int cpu = sched_getcpu();
  bool on_a_worker_core = false;
  for (size_t i = 1; i < cpu_ids_.size(); ++i) on_a_worker_core = on_a_worker_core || cpu_ids_[i] == cpu;
  if (!on_a_worker_core) return;
  // Pinned to worker 0's core, the thread moves there before the call returns; its own cpu set
  // back, it stays there until the scheduler has a reason to move it.
  cpu_set_t own;
  if (pthread_getaffinity_np(pthread_self(), sizeof own, &own) != 0) return;
  pin_current_thread(cpu_ids_[0]);
  pthread_setaffinity_np(pthread_self(), sizeof own, &own);
}

void ThreadPool::run_on_all(FunctionRef<void(int)> fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  // The calling thread is worker 0 but not pinned (it keeps the rank's whole core set). Left on the
  // core of a pinned worker, the two can share that core for the whole job while worker 0's own
  // core idles: the scheduler did not move the caller within a product, and a 128-row prefill
  // product on 2 threads ran at the 1-thread rate in a third of the kernel bench's rounds
  // (docs/performance.md, session 45). A check of the current cpu costs nanoseconds.
  leave_workers_cores();
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    pending_.store(num_threads_ - 1, std::memory_order_relaxed);
    first_error_ = nullptr;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0);
  } catch (...) {
    mine = std::current_exception();
  }
  spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  if (mine) std::rethrow_exception(mine);
  if (first_error_) std::rethrow_exception(first_error_);
}

void ThreadPool::parallel_for(int64_t count, FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (count <= 0) return;
  const int64_t n = num_threads_;
  run_on_all([&](int t) {
    const int64_t begin = count * t / n;
    const int64_t end = count * (t + 1) / n;
    if (begin < end) fn(begin, end, t);
  });
}

}  // namespace meshnn
