# The Llama model and its generation loop at 1, 2, 4 and 8 ranks (every mesh shape of that size,
# tp / 2d / dp / hybrid), against a float64 reference and against its own single-request runs.
meshnn_add_mpi_test_binary(meshnn_mpi_llama_tests ${CMAKE_CURRENT_LIST_DIR}/test_llama.cpp
                           ${CMAKE_CURRENT_LIST_DIR}/test_llama_generation.cpp
                           ${CMAKE_CURRENT_LIST_DIR}/test_llama_structured.cpp ${CMAKE_CURRENT_LIST_DIR}/llama_test_models.cpp)
foreach(ranks 1 2 4 8)
  meshnn_add_mpi_test(meshnn_mpi_llama_tests RANKS ${ranks} TIMEOUT 600)
endforeach()
# The model on 2 and 4 ranks over TCP, as between nodes.
foreach(ranks 2 4)
  meshnn_add_mpi_test(meshnn_mpi_llama_tests RANKS ${ranks} TIMEOUT 600 NAME tcp ENV ${MESHNN_MPI_TCP_ENV})
endforeach()

# A decode step after the first allocates no tensor memory and builds no collective plan. Its own
# binary: it replaces operator new to count heap allocations.
meshnn_add_mpi_test_binary(meshnn_mpi_llama_step_tests ${CMAKE_CURRENT_LIST_DIR}/test_llama_step.cpp)
foreach(ranks 1 2 4)
  meshnn_add_mpi_test(meshnn_mpi_llama_step_tests RANKS ${ranks} TIMEOUT 300)
endforeach()

# The LLM job traced and profiled on 2 ranks: the merged timeline and the profile through their files.
add_test(NAME meshnn_trace_job
         COMMAND ${MESHNN_SYSTEM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../system/trace_job.py ${CMAKE_BINARY_DIR}
                 ${CMAKE_BINARY_DIR}/trace_job_work ${MPIEXEC_EXECUTABLE} ${MESHNN_MPIEXEC_FLAGS})
set_tests_properties(meshnn_trace_job PROPERTIES TIMEOUT 300 LABELS system PROCESSORS 2
                     ENVIRONMENT "${MESHNN_MPI_TEST_ENV}")
