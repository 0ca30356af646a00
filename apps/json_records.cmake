# The benchmarks build their JSON records with nlohmann-json (the library keeps it private).
foreach(app meshnn-ccl-bench meshnn-kernel-bench meshnn-dmm-bench meshnn-calibrate)
  target_link_libraries(${app} PRIVATE nlohmann_json::nlohmann_json)
endforeach()
