#include "meshnn/runtime/app.hpp"

#include <cstdio>
#include <string>

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

int run_app(int argc, char** argv, const std::function<int(Runtime&, int, char**)>& body) {
  Runtime runtime(argc, argv);
  int status = 0;
  try {
    status = run_reporting("meshnn", runtime.world_rank() == 0, [&] { return body(runtime, argc, argv); });
  } catch (const std::exception& e) {
    fatal(std::string("unexpected exception: ") + e.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return status;
}

int run_tool(const char* name, int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    return run_reporting(name, true, [&] { return body(argc, argv); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitError;
  }
}

}  // namespace meshnn
