// meshnn-kernel-bench's oneDNN column: oneDNN's bfloat16 matmul (the peer of our bf16 path),
// measured beside ours and OpenBLAS when the activations are bfloat16. Built with oneDNN when
// CMake found it (MESHNN_HAVE_ONEDNN, apps/kernel_bench.cmake); otherwise onednn_available() is
// false and OnednnMatmul cannot be constructed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace meshnn::bench {

bool onednn_available();
// For the bench's header: version, CPU threading runtime and the instruction set oneDNN's JIT
// uses on this CPU (dnnl::get_effective_cpu_isa), or why oneDNN is not measured.
std::string onednn_description();

// One oneDNN matmul C[M,N] (float32) = A[M,K] * B[K,N] with A and B in bfloat16, set up for
// `threads` threads: A (row-major) and B rounded from the float32 values given, B reordered to the
// layout the primitive chooses (format_tag::any), as a user would do once when loading weights;
// all of that here, outside the timed run(). a and b are only read, and only by the constructor.
class OnednnMatmul {
 public:
  OnednnMatmul(int64_t m, int64_t k, int64_t n, const float* a, const float* b, int threads);
  ~OnednnMatmul();
  OnednnMatmul(const OnednnMatmul&) = delete;
  OnednnMatmul& operator=(const OnednnMatmul&) = delete;

  // One execution with the constructor's thread count, returning when the output is written.
  void run();
  // The primitive's implementation, e.g. "brg:avx512_core_bf16" (impl_info_str()).
  const std::string& impl() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace meshnn::bench
