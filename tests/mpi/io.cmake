# HDF5 loading and writing at 1, 2 and 4 ranks.
meshnn_add_mpi_test_binary(meshnn_mpi_io_tests ${CMAKE_CURRENT_LIST_DIR}/test_hdf5_io.cpp)
foreach(ranks 1 2 4)
  meshnn_add_mpi_test(meshnn_mpi_io_tests RANKS ${ranks} TIMEOUT 240)
endforeach()

# Files written by h5py, the way people write weights (tests/io/h5py_files.py generates them at
# test time with Debian's python3-h5py, through MESHNN_SYSTEM_PYTHON from tests/CMakeLists.txt).
add_test(NAME meshnn_h5py_files_setup
         COMMAND ${MESHNN_SYSTEM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../io/h5py_files.py ${CMAKE_BINARY_DIR}/h5py_files)
set_tests_properties(meshnn_h5py_files_setup PROPERTIES FIXTURES_SETUP h5py_files LABELS mpi TIMEOUT 120)
meshnn_add_mpi_test_binary(meshnn_mpi_h5py_tests ${CMAKE_CURRENT_LIST_DIR}/test_h5py_files.cpp)
foreach(ranks 1 2)
  meshnn_add_mpi_test(meshnn_mpi_h5py_tests RANKS ${ranks} TIMEOUT 240)
  set_tests_properties(meshnn_mpi_h5py_tests.np${ranks} PROPERTIES FIXTURES_REQUIRED h5py_files
                       ENVIRONMENT "${MESHNN_MPI_TEST_ENV};MESHNN_H5PY_DIR=${CMAKE_BINARY_DIR}/h5py_files")
endforeach()

# meshnn-convert end to end: Hugging Face directories built by the test (its own safetensors
# writer), checked bit for bit with h5py, hostile input, and the jobs' results on converted files
# against the same weights written directly, on 1 and 2 ranks.
add_test(NAME meshnn_convert
         COMMAND ${MESHNN_SYSTEM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../io/test_convert.py ${CMAKE_BINARY_DIR}
                 ${CMAKE_BINARY_DIR}/convert_work ${MPIEXEC_EXECUTABLE} ${MESHNN_MPIEXEC_FLAGS})
set_tests_properties(meshnn_convert PROPERTIES TIMEOUT 600 LABELS system PROCESSORS 2
                     ENVIRONMENT "${MESHNN_MPI_TEST_ENV}")

# Text in, text out: a trained SentencePiece tokenizer converted with the model, text prompts
# against the same prompts tokenized by python3-sentencepiece, streaming and the text in the file.
add_test(NAME meshnn_llm_text
         COMMAND ${MESHNN_SYSTEM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../io/test_llm_text.py ${CMAKE_BINARY_DIR}
                 ${CMAKE_BINARY_DIR}/llm_text_work ${MPIEXEC_EXECUTABLE} ${MESHNN_MPIEXEC_FLAGS})
set_tests_properties(meshnn_llm_text PROPERTIES TIMEOUT 600 LABELS system PROCESSORS 2
                     ENVIRONMENT "${MESHNN_MPI_TEST_ENV}")

# The OpenAI-compatible server (meshnn-llm --serve) on 2 ranks, its clients Python's HTTP libraries:
# concurrent, streamed, chat, seeded and stopped requests against the batch job's answers, hang-ups,
# bad requests and shutdown.
add_test(NAME meshnn_llm_server
         COMMAND ${MESHNN_SYSTEM_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/../io/test_server.py ${CMAKE_BINARY_DIR}
                 ${CMAKE_BINARY_DIR}/llm_server_work ${MPIEXEC_EXECUTABLE} ${MESHNN_MPIEXEC_FLAGS})
set_tests_properties(meshnn_llm_server PROPERTIES TIMEOUT 600 LABELS system PROCESSORS 2
                     ENVIRONMENT "${MESHNN_MPI_TEST_ENV}")
