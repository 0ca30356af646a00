// What a job records about itself and prints at its end: the trace (MESHNN_TRACE=FILE or --trace
// FILE; core/trace.hpp) and the profile (--profile, --profile-csv FILE). Every app gets the
// options through parse_command_line (runtime/cli.hpp); run_app and run_tool finish them.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "meshnn/core/trace.hpp"

namespace CLI {
class App;
}

namespace meshnn {

struct TracingRequest {
  std::string trace_file;   // Chrome trace-event JSON, written by rank 0
  bool profile = false;     // per-op and per-collective tables on rank 0's stdout
  std::string profile_csv;  // the same tables, every rank's rows, as CSV (implies profile)
};

// Adds --trace, --profile and --profile-csv to `app`, filling the process's request.
void add_tracing_options(CLI::App& app);
// Starts recording if the request or MESHNN_TRACE asks for it (idempotent).
void begin_tracing();
// If recording: stops, writes the trace and prints / writes the profile. Collective over comm
// (MPI_COMM_NULL for one-process tools). Throws meshnn::Error, alike on every rank, if a file
// cannot be written.
void end_tracing(MPI_Comm comm);

// The profile of one rank's events: per name, calls, total and mean time, share of the run, and
// GFLOP/s / GB/s for ops, bus bandwidth and waiting time for collectives. `run_ns` is the span the
// shares refer to. Table for people, and CSV rows "rank,kind,name,calls,..." (header separate).
struct ProfileRow {
  std::string kind, name;  // kind: "op", "ccl", "phase"
  int64_t calls = 0;
  double total_ms = 0, mean_us = 0, share = 0, gflops = 0, gbytes_per_s = 0, busbw_gb_s = 0, wait_ms = 0;
};
std::vector<ProfileRow> profile_rows(const std::vector<trace::Event>& events, int64_t run_ns);
std::string profile_table(const std::vector<ProfileRow>& rows, int rank, double run_ms);
std::string profile_csv_header();
std::string profile_csv_rows(const std::vector<ProfileRow>& rows, int rank);

}  // namespace meshnn
