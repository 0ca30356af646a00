# HDF5 loading and writing at 1, 2 and 4 ranks.
meshnn_add_mpi_test_binary(meshnn_mpi_io_tests ${CMAKE_CURRENT_LIST_DIR}/test_hdf5_io.cpp)
foreach(ranks 1 2 4)
  meshnn_add_mpi_test(meshnn_mpi_io_tests RANKS ${ranks} TIMEOUT 240)
endforeach()
