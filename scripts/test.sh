#!/usr/bin/env bash
# Builds meshnn and runs the whole test suite with ctest: unit tests, MPI tests at 1-8 ranks, the
# error tier and the determinism check.
#   ./scripts/test.sh              Release build in build/, every test
#   ./scripts/test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build in
#                                  build-asan/ (the tiers' test binaries only), the unit and
#                                  MPI tiers (up to 4 ranks)
# Other arguments go to ctest (e.g. -R Ccl, -L unit).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ctest_args=(--output-on-failure --timeout 900 -j "$(meshnn_cores)")
if [ "${1:-}" = "--sanitize" ]; then
  shift
  export MESHNN_BUILD="$MESHNN_ROOT/build-asan"
  export MESHNN_BUILD_TYPE=RelWithDebInfo
  MESHNN_BUILD_TARGET=meshnn_unit_and_mpi_tests "$MESHNN_ROOT/scripts/build.sh" -DMESHNN_SANITIZE=ON
  # Any report fails the test: UBSan halts, ASan aborts. LeakSanitizer runs on the unit tier; the
  # MPI tier runs without it, because Open MPI unloads its components at MPI_Finalize and their
  # exit-time allocations can then be neither attributed nor suppressed.
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  export LSAN_OPTIONS="suppressions=$MESHNN_ROOT/tests/sanitizers/lsan.supp:print_suppressions=0"
  cd "$MESHNN_BUILD"
  ASAN_OPTIONS="abort_on_error=1:halt_on_error=1:detect_leaks=1" ctest "${ctest_args[@]}" -L unit "$@"
  ASAN_OPTIONS="abort_on_error=1:halt_on_error=1:detect_leaks=0" ctest "${ctest_args[@]}" -L mpi -E 'np8' "$@"
  exit
fi
"$MESHNN_ROOT/scripts/build.sh"
cd "$MESHNN_BUILD"
ctest "${ctest_args[@]}" "$@"
