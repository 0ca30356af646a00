# meshnn-kernel-bench measures OpenBLAS (single-threaded sgemm/sgemv) beside meshnn's kernels.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
if(OPENBLAS_FOUND)
  target_link_libraries(meshnn-kernel-bench PRIVATE PkgConfig::OPENBLAS)
  target_compile_definitions(meshnn-kernel-bench PRIVATE MESHNN_HAVE_OPENBLAS=1)
else()
  message(STATUS "meshnn-kernel-bench: OpenBLAS not found (pkg-config openblas); its columns will be empty")
endif()
