// gtest main for tests run under mpiexec: every rank runs every test; rank 0 prints the usual
// report, other ranks print only their failures (prefixed with the rank); the process exit status
// is failure on every rank if any rank failed, so ctest sees one verdict.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "meshnn/runtime/runtime.hpp"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.summary());
  }

 private:
  int rank_;
};

// The files the tests write (::testing::TempDir(): models, tokens, outputs) go to one directory per
// run, made by rank 0 and removed after the last test, so that passing runs leave nothing behind
// (a failing run keeps them, for a look).
std::string make_run_directory(int rank) {
  std::vector<char> path(4096, '\0');
  if (rank == 0) {
    const std::string pattern = ::testing::TempDir() + "meshnn_mpi_test_XXXXXX";
    pattern.copy(path.data(), path.size() - 1);
    if (mkdtemp(path.data()) == nullptr) path.assign(path.size(), '\0');  // the tests then use TempDir() as it is
  }
  MPI_Bcast(path.data(), static_cast<int>(path.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string dir(path.data());
  if (!dir.empty()) setenv("TEST_TMPDIR", dir.c_str(), 1);  // what TempDir() returns from now on
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  meshnn::Runtime runtime(argc, argv);
  if (runtime.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(runtime.world_rank()));
  }
  const std::string run_directory = make_run_directory(runtime.world_rank());
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);  // every rank is done with the files
  if (runtime.world_rank() == 0 && !run_directory.empty()) {
    std::error_code ignored;
    if (any_failed)
      std::fprintf(stderr, "the tests' files are kept in %s\n", run_directory.c_str());
    else
      std::filesystem::remove_all(run_directory, ignored);
  }
  return any_failed;
}
