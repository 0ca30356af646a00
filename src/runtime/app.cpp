#include "meshnn/runtime/app.hpp"

#include "meshnn/runtime/options.hpp"

#include <cstdio>

namespace meshnn {

int run_app(int argc, char** argv, const std::function<int(Runtime&, int, char**)>& body) {
  Runtime runtime(argc, argv);
  int status = 0;
  try {
    status = body(runtime, argc, argv);
  } catch (const HelpRequested& e) {
    if (runtime.world_rank() == 0) std::printf("%s", e.what());
    status = 0;
  } catch (const UsageError& e) {
    if (runtime.world_rank() == 0) std::fprintf(stderr, "meshnn: usage error: %s\n", e.what());
    status = kExitUsage;
  } catch (const Error& e) {
    if (runtime.world_rank() == 0) std::fprintf(stderr, "meshnn: error: %s\n", e.what());
    status = kExitError;
  } catch (const std::exception& e) {
    fatal(std::string("unexpected exception: ") + e.what());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return status;
}

}  // namespace meshnn
