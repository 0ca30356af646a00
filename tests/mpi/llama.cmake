# The Llama model and its generation loop at 1, 2, 4 and 8 ranks (every mesh shape of that size,
# tp / 2d / dp / hybrid), against a float64 reference and against its own single-request runs.
meshnn_add_mpi_test_binary(meshnn_mpi_llama_tests ${CMAKE_CURRENT_LIST_DIR}/test_llama.cpp)
foreach(ranks 1 2 4 8)
  meshnn_add_mpi_test(meshnn_mpi_llama_tests RANKS ${ranks} TIMEOUT 600)
endforeach()

# A decode step after the first allocates no tensor memory and builds no collective plan. Its own
# binary: it replaces operator new to count heap allocations.
meshnn_add_mpi_test_binary(meshnn_mpi_llama_step_tests ${CMAKE_CURRENT_LIST_DIR}/test_llama_step.cpp)
foreach(ranks 1 2 4)
  meshnn_add_mpi_test(meshnn_mpi_llama_step_tests RANKS ${ranks} TIMEOUT 300)
endforeach()
