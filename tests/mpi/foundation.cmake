# Foundation: mesh device, mappers and composers, distributed matmul (SUMMA too), at 1, 2, 4 and 8 ranks.
meshnn_add_mpi_test_binary(meshnn_mpi_foundation_tests
                           ${CMAKE_CURRENT_LIST_DIR}/test_mesh.cpp ${CMAKE_CURRENT_LIST_DIR}/test_distribute.cpp
                           ${CMAKE_CURRENT_LIST_DIR}/test_redistribute.cpp ${CMAKE_CURRENT_LIST_DIR}/test_distributed_matmul.cpp
                           ${CMAKE_CURRENT_LIST_DIR}/test_collective_matmul.cpp
                           ${CMAKE_CURRENT_LIST_DIR}/test_summa.cpp)
foreach(ranks 1 2 4 8)
  meshnn_add_mpi_test(meshnn_mpi_foundation_tests RANKS ${ranks} TIMEOUT 240)
endforeach()
