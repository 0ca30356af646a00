// The rank's worker threads: every index visited once, ranges contiguous, errors propagated.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "meshnn/core/error.hpp"
#include "meshnn/core/thread_pool.hpp"

namespace meshnn {
namespace {

TEST(ThreadPool, ParallelForVisitsEveryIndexOnceInContiguousRanges) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
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

TEST(ThreadPool, RethrowsAWorkersExceptionAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.run_on_all([](int t) {
    if (t == 2) throw std::runtime_error("worker failed");
  }),
               std::runtime_error);
  std::atomic<int> ran{0};
  pool.run_on_all([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 3);
  EXPECT_THROW(ThreadPool(0), Error);
}

}  // namespace
}  // namespace meshnn
