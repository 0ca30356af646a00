// The rank's worker threads: every index visited once, ranges contiguous, errors propagated.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "meshnn/runtime/options.hpp"
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

TEST(Options, ParsesStrictlyAndNamesTheOption) {
  OptionParser cli("t", "test");
  cli.add_option("n", "N", "count", "4");
  cli.add_option("size", "S", "bytes");
  cli.add_flag("check", "flag");
  std::vector<std::string> words = {"t", "--n=12", "--size", "64K", "--check"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  cli.parse(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(cli.get_int("n", 1, 100), 12);
  EXPECT_EQ(cli.get_int("size", 1, INT64_MAX, true), 65536);
  EXPECT_TRUE(cli.flag("check"));
  EXPECT_THROW(cli.get_int("n", 1, 10), UsageError);
  EXPECT_EQ(parse_size("2G", "x"), int64_t{2} << 30);
  for (const char* bad : {"", "K", "1.5M", "-", "12Q", "99999999999999999999"})
    EXPECT_THROW(parse_size(bad, "x"), UsageError) << bad;
  OptionParser strict("t", "test");
  std::vector<std::string> unknown = {"t", "--nope"};
  std::vector<char*> argv2;
  for (auto& w : unknown) argv2.push_back(w.data());
  EXPECT_THROW(strict.parse(2, argv2.data()), UsageError);
}

}  // namespace
}  // namespace meshnn
