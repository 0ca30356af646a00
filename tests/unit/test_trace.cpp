// Tracing without MPI (core/trace.hpp, runtime/tracing.hpp): what is recorded on and off, the
// Chrome trace-event file, and the profile's sums.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "meshnn/core/error.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/runtime/tracing.hpp"

namespace meshnn {
namespace {

std::string temp_file(const char* name) { return ::testing::TempDir() + "/meshnn_trace_test_" + name; }

TEST(Trace, NothingIsRecordedWhenOff) {
  ASSERT_FALSE(trace::enabled());
  {
    trace::Scope scope("op", "off");
    EXPECT_FALSE(scope.active());
  }
  trace::record("op", "off too", 0, 10);
  trace::start();
  const std::vector<trace::Event> events = trace::write_and_stop(MPI_COMM_NULL, "");
  EXPECT_TRUE(events.empty());
}

TEST(Trace, ScopesThreadsAndTransfersReachTheFile) {
  trace::start();
  trace::name_this_thread("main");
  {
    trace::Scope outer("phase", "outer");
    ASSERT_TRUE(outer.active());
    trace::Scope inner("op", "inner");
    inner.describe(R"("m":3)", {.flops = 6e9});
  }
  std::thread worker([] {
    trace::name_this_thread("worker 1");
    trace::Scope scope("op", "on a worker");
  });
  worker.join();
  const int64_t t = trace::now_ns();
  trace::record("transfer", "send", t, t + 5000, R"("peer":"position 1","bytes":64)", {}, true);
  trace::record("transfer", "recv", t + 1000, t + 4000, R"("peer":"position 1","bytes":64)", {}, true);
  const std::string file = temp_file("scopes.json");
  const std::vector<trace::Event> events = trace::write_and_stop(MPI_COMM_NULL, file);
  EXPECT_FALSE(trace::enabled());
  ASSERT_EQ(events.size(), 5u);

  const nlohmann::json j = nlohmann::json::parse(std::ifstream(file));
  std::map<std::string, std::vector<nlohmann::json>> by_name;
  std::set<std::string> thread_names;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") thread_names.insert(e.at("args").at("name"));
    if (e.at("ph") != "M") by_name[e.at("name")].push_back(e);
  }
  EXPECT_EQ(thread_names, (std::set<std::string>{"main", "worker 1"}));
  ASSERT_EQ(by_name["outer"].size(), 1u);
  ASSERT_EQ(by_name["inner"].size(), 1u);
  const auto& outer = by_name["outer"][0];
  const auto& inner = by_name["inner"][0];
  EXPECT_EQ(outer.at("ph"), "X");
  EXPECT_EQ(inner.at("args").at("m"), 3);
  EXPECT_EQ(inner.at("args").at("flops"), 6e9);
  // Nested on one thread: the inner span lies inside the outer one.
  EXPECT_GE(inner.at("ts").get<double>(), outer.at("ts").get<double>());
  EXPECT_LE(inner.at("ts").get<double>() + inner.at("dur").get<double>(),
            outer.at("ts").get<double>() + outer.at("dur").get<double>() + 1e-3);
  EXPECT_NE(by_name["on a worker"][0].at("tid"), inner.at("tid"));
  // Transfers overlap: async begin/end pairs with one id each.
  ASSERT_EQ(by_name["send"].size(), 2u);
  EXPECT_EQ(by_name["send"][0].at("ph"), "b");
  EXPECT_EQ(by_name["send"][1].at("ph"), "e");
  EXPECT_EQ(by_name["send"][0].at("id"), by_name["send"][1].at("id"));
  EXPECT_NE(by_name["send"][0].at("id"), by_name["recv"][0].at("id"));
  EXPECT_NEAR(by_name["send"][1].at("ts").get<double>() - by_name["send"][0].at("ts").get<double>(), 5.0, 1e-3);
}

TEST(Trace, AFileThatCannotBeWrittenIsAClearError) {
  trace::start();
  trace::record("op", "x", 0, 1);
  EXPECT_THROW(
      {
        try {
          trace::write_and_stop(MPI_COMM_NULL, "/nonexistent-dir/trace.json");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("cannot write the trace to '/nonexistent-dir/trace.json'"),
                    std::string::npos);
          throw;
        }
      },
      Error);
  EXPECT_FALSE(trace::enabled());
}

TEST(Profile, SumsCallsTimesRatesAndWaitsPerName) {
  std::vector<trace::Event> events;
  auto add = [&](const char* category, const char* name, int64_t begin, int64_t duration, trace::Work work) {
    trace::Event e;
    e.category = category;
    e.name = name;
    e.begin_ns = begin;
    e.duration_ns = duration;
    e.work = work;
    events.push_back(e);
  };
  add("phase", "decode step", 0, 10'000'000, {});
  add("op", "matmul", 0, 2'000'000, {.flops = 4e9, .bytes = 1e6});
  add("op", "matmul", 3'000'000, 2'000'000, {.flops = 4e9, .bytes = 1e6});
  add("ccl", "all_reduce", 6'000'000, 1'000'000, {.bus_bytes = 5e6, .wait_ns = 400'000});
  add("transfer", "send", 6'000'000, 500'000, {});
  const std::vector<ProfileRow> rows = profile_rows(events, 10'000'000);
  ASSERT_EQ(rows.size(), 3u);  // transfers are parts of their collective
  EXPECT_EQ(rows[0].name, "decode step");
  const ProfileRow& mm = rows[1];
  EXPECT_EQ(mm.name, "matmul");
  EXPECT_EQ(mm.calls, 2);
  EXPECT_DOUBLE_EQ(mm.total_ms, 4.0);
  EXPECT_DOUBLE_EQ(mm.mean_us, 2000.0);
  EXPECT_DOUBLE_EQ(mm.share, 0.4);
  EXPECT_DOUBLE_EQ(mm.gflops, 2000.0);  // 8e9 flops in 4 ms
  EXPECT_DOUBLE_EQ(mm.gbytes_per_s, 0.5);
  const ProfileRow& ar = rows[2];
  EXPECT_DOUBLE_EQ(ar.busbw_gb_s, 5.0);
  EXPECT_DOUBLE_EQ(ar.wait_ms, 0.4);
  const std::string csv = profile_csv_rows(rows, 3);
  EXPECT_NE(csv.find("3,op,\"matmul\",2,4.000000,2000.000,0.400000,2000.0000,0.5000,0.0000,0.000000"), std::string::npos)
      << csv;
  EXPECT_NE(profile_table(rows, 3, 10.0).find("matmul"), std::string::npos);
}

}  // namespace
}  // namespace meshnn
