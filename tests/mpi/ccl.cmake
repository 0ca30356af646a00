# Collectives on mesh tensors at 2, 4 and 8 ranks (meshes 1xN and 2x2 / 2x4, cluster_axis 0, 1, none).
meshnn_add_mpi_test_binary(meshnn_mpi_ccl_tests ${CMAKE_CURRENT_LIST_DIR}/test_ccl_collectives.cpp)
foreach(ranks 2 4 8)
  meshnn_add_mpi_test(meshnn_mpi_ccl_tests RANKS ${ranks} TIMEOUT 300)
endforeach()
# The same over TCP, as between nodes.
foreach(ranks 2 4)
  meshnn_add_mpi_test(meshnn_mpi_ccl_tests RANKS ${ranks} TIMEOUT 300 NAME tcp ENV ${MESHNN_MPI_TCP_ENV})
endforeach()
