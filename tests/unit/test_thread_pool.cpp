// The rank's worker threads: every index visited once, ranges contiguous, errors propagated;
// with workers that poll between jobs (the Runtime's) as with workers that sleep at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "meshnn/core/error.hpp"
#include "meshnn/core/thread_pool.hpp"

namespace meshnn {
namespace {

class ThreadPoolSpin : public ::testing::TestWithParam<int> {
 protected:
  std::chrono::microseconds spin() const { return std::chrono::microseconds{GetParam()}; }
};

TEST_P(ThreadPoolSpin, ParallelForVisitsEveryIndexOnceInContiguousRanges) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads, {}, spin());
    for (int64_t count : {0, 1, 5, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
      std::atomic<int> calls{0};
      pool.parallel_for(count, [&](int64_t begin, int64_t end, int t) {
        EXPECT_LT(begin, end);
        EXPECT_GE(t, 0);
        EXPECT_LT(t, threads);
        ++calls;
        for (int64_t i = begin; i < end; ++i) ++seen[static_cast<size_t>(i)];
      });
      for (const auto& s : seen) EXPECT_EQ(s.load(), 1);
      EXPECT_LE(calls.load(), threads);
    }
  }
}

TEST_P(ThreadPoolSpin, RethrowsAWorkersExceptionAndStaysUsable) {
  ThreadPool pool(3, {}, spin());
  EXPECT_THROW(pool.run_on_all([](int t) {
    if (t == 2) throw std::runtime_error("worker failed");
  }),
               std::runtime_error);
  std::atomic<int> ran{0};
  pool.run_on_all([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 3);
  EXPECT_THROW(ThreadPool(0), Error);
}

// Jobs back to back (workers still polling), after pauses longer than the polling (workers
// asleep), and the pool destroyed in either state: every job's work is seen by the caller.
TEST_P(ThreadPoolSpin, JobsAfterShortAndLongGapsAndDestructionInEitherState) {
  for (int gap_us : {0, 50, 2000}) {
    ThreadPool pool(2, {}, spin());
    int64_t total = 0;
    std::vector<int64_t> part(2);
    for (int job = 0; job < 200; ++job) {
      pool.parallel_for(2, [&](int64_t begin, int64_t, int t) { part[static_cast<size_t>(t)] = begin + job; });
      total += part[0] + part[1];
      if (gap_us > 0 && job % 20 == 0) std::this_thread::sleep_for(std::chrono::microseconds{gap_us});
    }
    EXPECT_EQ(total, 200 * 1 + 2 * (199 * 200 / 2)) << "gap " << gap_us << " us";
  }
}

INSTANTIATE_TEST_SUITE_P(Waits, ThreadPoolSpin, ::testing::Values(0, 200),
                         [](const auto& info) { return info.param == 0 ? "sleeping" : "polling"; });

}  // namespace
}  // namespace meshnn
