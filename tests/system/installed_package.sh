#!/usr/bin/env bash
# meshnn as another CMake project uses it: installs this build to a scratch prefix, builds
# tests/consumer/ (find_package(meshnn COMPONENTS core)) against it, checks that its link brings
# none of the dependencies that core does not need and runs it on 2 ranks; then finds the package
# without components and links a program that needs every component through meshnn::meshnn.
#   installed_package.sh BUILD_DIR WORK_DIR
# CMAKE and CXX (from ctest) choose the cmake and the compiler; default: those on PATH.
set -euo pipefail
build=$1 work=$2
root="$(cd "$(dirname "$0")/../.." && pwd)"
cmake=${CMAKE:-cmake}
prefix=$work/prefix consumer=$work/consumer
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || {
  cat "$work/install.log"; fail "cmake --install $build did not install"; }

# pkg-config (HDF5, SentencePiece, PCRE2, utf8proc, hwloc), CLI11 and nlohmann-json are put out of
# find_package's reach: core must not look for them.
"$cmake" -S "$root/tests/consumer" -B "$consumer" --no-warn-unused-cli -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON >"$work/configure.log" 2>&1 || {
  cat "$work/configure.log"; fail "the consumer did not configure against $prefix"; }
found=$(sed -n 's/^meshnn_DIR:PATH=//p' "$consumer/CMakeCache.txt")
[ "$found" -ef "$prefix/lib/cmake/meshnn" ] || fail "find_package(meshnn) found '$found', not the installed package"
"$cmake" --build "$consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "the consumer did not build"; }

unwanted='hdf5|sentencepiece|pcre2|utf8proc|hwloc'
link=$consumer/CMakeFiles/consumer.dir/link.txt
if grep -Eio "[^ ]*($unwanted)[^ ]*" "$link"; then fail "the consumer's link names the above ($link)"; fi
# Not hwloc here: Open MPI's own libraries load it.
if ldd "$consumer/consumer" | grep -Ei 'hdf5|sentencepiece|pcre2|utf8proc'; then fail "the consumer loads the above"; fi
echo "link: meshnn::core only ($(grep -Eo 'libmeshnn_[a-z]+\.a' "$link" | sort -u | tr '\n' ' '))"

"$root/scripts/mpirun.sh" -np 2 "$consumer/consumer" || fail "the consumer failed on 2 ranks"

everything=$work/everything
"$cmake" -S "$root/tests/consumer" -B "$everything" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCONSUMER_ALL_COMPONENTS=ON >"$work/configure_everything.log" 2>&1 || {
  cat "$work/configure_everything.log"; fail "find_package(meshnn) without components did not configure"; }
"$cmake" --build "$everything" >"$work/build_everything.log" 2>&1 || {
  cat "$work/build_everything.log"; fail "a program on meshnn::meshnn did not build"; }
# The same check on this link must find all of them, or the one above proves nothing.
for lib in hdf5 sentencepiece pcre2 utf8proc hwloc; do
  grep -qi "$lib" "$everything/CMakeFiles/everything.dir/link.txt" || fail "meshnn::meshnn's link has no $lib"
done
echo "installed package: core consumer built, linked without $unwanted and ran on 2 ranks;"
echo "a program on meshnn::meshnn built with every component and $unwanted"
