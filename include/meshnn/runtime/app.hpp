// The shape of every meshnn main: start the Runtime, run the body, and turn errors into one clear
// message and an exit status.
//
//   int main(int argc, char** argv) {
//     return meshnn::run_app(argc, argv, [](meshnn::Runtime& rt, int argc, char** argv) { ...; return 0; });
//   }
//
// meshnn::Error is symmetric by construction (every rank throws the same one), so each rank exits
// with status 1 after rank 0 prints "meshnn: error: <message>". Any other exception may be
// rank-local: it goes through meshnn::fatal and aborts the job, so no rank is left waiting.
#pragma once

#include <functional>

#include "meshnn/core/error.hpp"
#include "meshnn/runtime/runtime.hpp"

namespace meshnn {

inline constexpr int kExitUsage = 2;  // bad command line (options, values)
inline constexpr int kExitError = 1;  // a meshnn::Error while running

// Thrown by command-line parsing; printed like Error but exits with kExitUsage.
struct UsageError : Error {
  using Error::Error;
};

// Thrown by command-line parsing on --help, carrying the usage: printed (once) to stdout, exit 0.
struct HelpRequested : Error {
  using Error::Error;
};

// `threads`: which threads may call MPI (runtime.hpp).
int run_app(int argc, char** argv, const std::function<int(Runtime&, int, char**)>& body,
            MpiThreads threads = MpiThreads::FUNNELED);

// The same for a one-process tool that needs no MPI (meshnn-convert, meshnn-make-weights,
// meshnn-kernel-bench): the messages start with the tool's name, and any exception (a filesystem
// error, say) is an error rather than an abort, since no other rank waits on this one.
int run_tool(const char* name, int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace meshnn
