#include "meshnn/runtime/tracing.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn {
namespace {

TracingRequest& request() {
  static TracingRequest r;
  return r;
}

std::string trace_file_wanted() {
  if (!request().trace_file.empty()) return request().trace_file;
  const char* env = std::getenv("MESHNN_TRACE");
  return env != nullptr ? std::string(env) : std::string();
}

bool profile_wanted() { return request().profile || !request().profile_csv.empty(); }

}  // namespace

void add_tracing_options(CLI::App& app) {
  app.add_option("--trace", request().trace_file,
                 "record a timeline of every op, collective transfer and phase on every rank into FILE (Chrome "
                 "trace-event JSON, opens in Perfetto); also MESHNN_TRACE=FILE");
  app.add_flag("--profile", request().profile, "at the end, per-op and per-collective tables (rank 0)");
  app.add_option("--profile-csv", request().profile_csv, "also write the profile of every rank to FILE as CSV");
}

void begin_tracing() {
  if (trace_file_wanted().empty() && !profile_wanted()) return;
  trace::name_this_thread("main");
  trace::start();
}

void end_tracing(MPI_Comm comm) {
  if (!trace::enabled()) return;
  std::vector<trace::Event> events = trace::write_and_stop(comm, trace_file_wanted());
  if (!profile_wanted()) return;
  int64_t run_ns = 0;
  for (const trace::Event& e : events) run_ns = std::max(run_ns, e.begin_ns + e.duration_ns);
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  const bool distributed = mpi_up != 0 && comm != MPI_COMM_NULL;
  const int rank = distributed ? comm_rank(comm) : 0;
  const std::vector<ProfileRow> rows = profile_rows(events, run_ns);
  if (rank == 0) std::fputs(profile_table(rows, rank, static_cast<double>(run_ns) / 1e6).c_str(), stdout);
  const std::vector<std::string> csv = trace::gather_to_rank0(distributed ? comm : MPI_COMM_NULL, profile_csv_rows(rows, rank));
  std::string message;
  bool ok = true;
  if (rank == 0 && !request().profile_csv.empty()) {
    std::FILE* f = std::fopen(request().profile_csv.c_str(), "w");
    ok = f != nullptr;
    if (f != nullptr) {
      std::fputs(profile_csv_header().c_str(), f);
      for (const std::string& part : csv) std::fputs(part.c_str(), f);
      ok = std::fclose(f) == 0;
    }
    if (!ok) message = fmt::format("cannot write the profile to '{}'", request().profile_csv);
  }
  if (distributed) agree_on_failure(comm, "writing the profile", ok, message);
  else MESHNN_CHECK(ok, "{}", message);
}

std::vector<ProfileRow> profile_rows(const std::vector<trace::Event>& events, int64_t run_ns) {
  struct Sum {
    int64_t calls = 0, ns = 0, wait_ns = 0;
    double flops = 0, bytes = 0, bus_bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, Sum> sums;
  for (const trace::Event& e : events) {
    const std::string kind = e.category;
    if (kind == "transfer") continue;  // parts of a collective, counted in it
    Sum& s = sums[{kind, e.name}];
    ++s.calls;
    s.ns += e.duration_ns;
    s.wait_ns += e.work.wait_ns;
    s.flops += e.work.flops;
    s.bytes += e.work.bytes;
    s.bus_bytes += e.work.bus_bytes;
  }
  std::vector<ProfileRow> rows;
  for (const auto& [key, s] : sums) {
    ProfileRow r;
    r.kind = key.first;
    r.name = key.second;
    r.calls = s.calls;
    r.total_ms = static_cast<double>(s.ns) / 1e6;
    r.mean_us = static_cast<double>(s.ns) / 1e3 / static_cast<double>(s.calls);
    r.share = run_ns > 0 ? static_cast<double>(s.ns) / static_cast<double>(run_ns) : 0.0;
    const double seconds = static_cast<double>(s.ns) / 1e9;
    if (seconds > 0) {
      r.gflops = s.flops / seconds / 1e9;
      r.gbytes_per_s = s.bytes / seconds / 1e9;
      r.busbw_gb_s = s.bus_bytes / seconds / 1e9;
    }
    r.wait_ms = static_cast<double>(s.wait_ns) / 1e6;
    rows.push_back(std::move(r));
  }
  // Phases first, then what took longest.
  std::stable_sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    if ((a.kind == "phase") != (b.kind == "phase")) return a.kind == "phase";
    return a.total_ms > b.total_ms;
  });
  return rows;
}

std::string profile_table(const std::vector<ProfileRow>& rows, int rank, double run_ms) {
  std::string out = fmt::format("profile of rank {} ({:.1f} ms traced; shares of that; ops nest in phases)\n", rank, run_ms);
  out += fmt::format("{:<6} {:<34} {:>7} {:>11} {:>11} {:>6} {:>9} {:>8} {:>9} {:>9}\n", "kind", "name", "calls",
                     "total ms", "mean us", "share", "GFLOP/s", "GB/s", "busbw", "wait ms");
  for (const ProfileRow& r : rows) {
    auto rate = [](double v) { return v > 0 ? fmt::format("{:.2f}", v) : std::string("-"); };
    out += fmt::format("{:<6} {:<34} {:>7} {:>11.3f} {:>11.1f} {:>5.1f}% {:>9} {:>8} {:>9} {:>9}\n", r.kind,
                       r.name.size() > 34 ? r.name.substr(0, 34) : r.name, r.calls, r.total_ms, r.mean_us,
                       100.0 * r.share, rate(r.gflops), rate(r.gbytes_per_s), rate(r.busbw_gb_s),
                       r.kind == "ccl" ? fmt::format("{:.3f}", r.wait_ms) : std::string("-"));
  }
  return out;
}

std::string profile_csv_header() {
  return "rank,kind,name,calls,total_ms,mean_us,share,gflops,gbytes_per_s,busbw_gb_s,wait_ms\n";
}

std::string profile_csv_rows(const std::vector<ProfileRow>& rows, int rank) {
  std::string out;
  for (const ProfileRow& r : rows)
    out += fmt::format("{},{},\"{}\",{},{:.6f},{:.3f},{:.6f},{:.4f},{:.4f},{:.4f},{:.6f}\n", rank, r.kind, r.name, r.calls,
                       r.total_ms, r.mean_us, r.share, r.gflops, r.gbytes_per_s, r.busbw_gb_s, r.wait_ms);
  return out;
}

}  // namespace meshnn
