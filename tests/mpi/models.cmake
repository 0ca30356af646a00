# The Falcon MLP job's modes at 1, 2, 4 and 8 ranks (every mesh shape of that size).
meshnn_add_mpi_test_binary(meshnn_mpi_model_tests ${CMAKE_CURRENT_LIST_DIR}/test_falcon_mlp.cpp)
foreach(ranks 1 2 4 8)
  meshnn_add_mpi_test(meshnn_mpi_model_tests RANKS ${ranks} TIMEOUT 400)
endforeach()
