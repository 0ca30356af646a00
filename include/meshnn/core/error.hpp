// Errors, the meshnn way (see README "Errors"):
//  - meshnn::Error is thrown by validation that runs *before* any communication and depends only
//    on values every rank shares, so every rank throws the same message at the same point and the
//    mesh stays usable.
//  - Rank-local failures (a file, a NaN) are agreed on first (agree_on_failure in
//    core/mpi_utils.hpp), then thrown.
//  - What cannot be made symmetric goes through meshnn::fatal(), which aborts the whole job.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace meshnn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Prints "[meshnn rank R (row, col)] message" to stderr and aborts every rank of the job
// (MPI_Abort when MPI is up, std::abort otherwise). Never returns.
[[noreturn]] void fatal(const std::string& message);

// Registers the mesh coordinate that fatal() prefixes to its messages ("" until a mesh opens).
void set_fatal_context(const std::string& context);

}  // namespace meshnn

// Always-on argument check: throws meshnn::Error with the formatted message.
#define MESHNN_CHECK(cond, ...)                                   \
  do {                                                            \
    if (!(cond)) throw ::meshnn::Error(::fmt::format(__VA_ARGS__)); \
  } while (0)

// Broken internal invariant that cannot be reported symmetrically: abort the job.
#define MESHNN_FATAL_IF(cond, ...)                                  \
  do {                                                              \
    if (cond) ::meshnn::fatal(::fmt::format(__VA_ARGS__));          \
  } while (0)
