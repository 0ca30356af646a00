# meshnn-kernel-bench's command line and its yardsticks (peak FMA rate, read bandwidth).
target_sources(meshnn-kernel-bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/kernel_bench_options.cpp
                                           ${CMAKE_CURRENT_SOURCE_DIR}/kernel_bench_machine.cpp
                                           ${CMAKE_CURRENT_SOURCE_DIR}/kernel_bench_attention.cpp)

# meshnn-kernel-bench measures OpenBLAS (single-threaded sgemm/sgemv) beside meshnn's kernels.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
if(OPENBLAS_FOUND)
  target_link_libraries(meshnn-kernel-bench PRIVATE PkgConfig::OPENBLAS)
  target_compile_definitions(meshnn-kernel-bench PRIVATE MESHNN_HAVE_OPENBLAS=1)
else()
  message(STATUS "meshnn-kernel-bench: OpenBLAS not found (pkg-config openblas); its columns will be empty")
endif()

# ... and oneDNN's bfloat16 matmul with --act bfloat16 (apps/kernel_bench_onednn.cpp, compiled with
# or without oneDNN). Found by header and library: Debian's dnnl-config.cmake requires OpenCL's
# development files (its GPU runtime), which a CPU-only user does not need. Its CPU threading runtime
# is OpenMP (libgomp): the bench links OpenMP to set oneDNN's thread count (omp_set_num_threads).
target_sources(meshnn-kernel-bench PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/kernel_bench_onednn.cpp)
find_path(ONEDNN_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(ONEDNN_LIBRARY dnnl)
find_package(OpenMP COMPONENTS CXX)
if(ONEDNN_INCLUDE_DIR AND ONEDNN_LIBRARY AND OpenMP_CXX_FOUND)
  target_include_directories(meshnn-kernel-bench SYSTEM PRIVATE ${ONEDNN_INCLUDE_DIR})
  target_link_libraries(meshnn-kernel-bench PRIVATE ${ONEDNN_LIBRARY} OpenMP::OpenMP_CXX)
  target_compile_definitions(meshnn-kernel-bench PRIVATE MESHNN_HAVE_ONEDNN=1)
else()
  message(STATUS "meshnn-kernel-bench: oneDNN not found (oneapi/dnnl/dnnl.hpp, libdnnl, OpenMP); its columns will be absent")
endif()
