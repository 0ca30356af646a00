#include "meshnn/runtime/app.hpp"

#include <cstdio>
#include <string>

#include "meshnn/runtime/tracing.hpp"

namespace meshnn {
namespace {

// Runs body and turns a meshnn::Error it throws into a message (printed when `print`: rank 0 of a
// job, every one-process tool) and the exit status. Other exceptions are left to the caller.
int run_reporting(const char* prefix, bool print, const std::function<int()>& body) {
  try {
    return body();
  } catch (const HelpRequested& e) {
    if (print) std::printf("%s", e.what());
    return 0;
  } catch (const UsageError& e) {
    if (print) std::fprintf(stderr, "%s: usage error: %s\n", prefix, e.what());
    return kExitUsage;
  } catch (const Error& e) {
    if (print) std::fprintf(stderr, "%s: error: %s\n", prefix, e.what());
    return kExitError;
  }
}

}  // namespace

int run_app(int argc, char** argv, const std::function<int(Runtime&, int, char**)>& body, MpiThreads threads) {
  Runtime runtime(argc, argv, threads);
  int status = 0;
  try {
    begin_tracing();  // MESHNN_TRACE: also for apps that parse no options
    status = run_reporting("meshnn", runtime.world_rank() == 0, [&] { return body(runtime, argc, argv); });
    // Every rank gets here alike (a meshnn::Error is thrown by all), so the trace can be merged.
    const int trace_status =
        run_reporting("meshnn", runtime.world_rank() == 0, [] { return end_tracing(MPI_COMM_WORLD), 0; });
    if (status == 0) status = trace_status;
  } catch (const std::exception& e) {
    fatal(std::string("unexpected exception: ") + e.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return status;
}

int run_tool(const char* name, int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    begin_tracing();
    const int status = run_reporting(name, true, [&] { return body(argc, argv); });
    const int trace_status = run_reporting(name, true, [] { return end_tracing(MPI_COMM_NULL), 0; });
    return status != 0 ? status : trace_status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitError;
  }
}

}  // namespace meshnn
