# The vocabulary-sharded sampler against its one-process reference at 1, 2 and 4 ranks (meshes
# 1xN, Nx1 and 2x2).
meshnn_add_mpi_test_binary(meshnn_mpi_serving_tests ${CMAKE_CURRENT_LIST_DIR}/test_sampler.cpp)
foreach(ranks 1 2 4)
  meshnn_add_mpi_test(meshnn_mpi_serving_tests RANKS ${ranks} TIMEOUT 300)
endforeach()
