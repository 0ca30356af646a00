// matmul / linear on one rank's TILE tensors (docs/spec/semantics.md §4), float32 accumulation.
//
// dtypes: activations (a, x) float32 or bfloat16; weights (b, w) float32, bfloat16, bfloat8_b or
// bfloat4_b, kept in their stored format (decoded tile by tile inside the kernel); output dtype
// chosen by MatmulOptions (default: the activation dtype). Work is spread over the rank's
// ThreadPool by columns of 32 (and by batch when there are more batches than threads).
// Kernels: AVX-512, AVX2/FMA or portable, chosen at run time (MESHNN_KERNELS=portable|avx2|avx512|
// avx512-bf16 caps the choice; see kernels/matmul_kernels.hpp). With bfloat16 activations and
// bfloat16/bfloat8_b/bfloat4_b weights on a CPU with AVX512-BF16, matmuls of more than 4 rows
// multiply in bfloat16 and accumulate in float32 (every product is exact; only the order of the
// float32 sums differs from the float32 path), and so do decode rows (up to 6) on bfloat8_b and,
// with VBMI, bfloat4_b; otherwise products are float32. Each calling thread keeps its float32 scratch
// (activations as rows, the float32 accumulators: (M + ...) x (K + N) floats) between calls.
#pragma once

#include <optional>

#include "meshnn/core/types.hpp"
#include "meshnn/core/thread_pool.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn {

enum class Activation { NONE, GELU, GELU_TANH, SILU, RELU };

struct MatmulOptions {
  std::optional<DataType> output_dtype;  // float32, bfloat16, bfloat8_b or bfloat4_b; default a's dtype
  // Worker threads; nullptr: the process's default pool (core/process_context.hpp: the Runtime's),
  // else the calling thread only.
  // ThreadPool::parallel_for is not reentrant: do not call ops from inside a task of that pool.
  ThreadPool* pool = nullptr;
  bool force_portable = false;  // run the portable kernels whatever the CPU (tests, comparisons)
  // Run the bf16 path through a portable emulation of an instruction (tests, on any CPU):
  // avx512-bf16's vdpbf16ps or AMX's tdpbf16ps; applies to the same operands as the hardware path.
  enum class Bf16Emulation { NONE, VDPBF16PS, TDPBF16PS };
  Bf16Emulation emulate_bf16 = Bf16Emulation::NONE;
  // Multiply by rows [*b_row_begin, *b_row_begin + K) of b instead of all of them (K = a's inner
  // dim): a K-slice of the weights read in place, not copied (the fused all_gather_matmul's
  // chunks). b must be one matrix (rank 2, or leading dims of 1), not transposed, and the start a
  // multiple of 32.
  std::optional<int64_t> b_row_begin;
};

// a [..., M, K] (transpose_a: stored [..., K, M]) times b [..., K, N] (transpose_b: stored
// [..., N, K]) -> [..., M, N] in TILE layout. Leading (batch) dims broadcast as in numpy/TT-NN:
// aligned from the right, each pair equal or one of them 1; so a rank-2 b multiplies every batch
// of a. Only the M valid rows are computed (decode with M = 1 costs one row, not 32).
// b's tile padding must be finite (TT-NN pads with 0): it meets zeros of a, and 0 * inf = NaN.
// Throws meshnn::Error for: rank < 2, a not float32/bfloat16, b not TILE or an unsupported dtype,
// inner dims that differ (naming both shapes), batch dims that do not broadcast, an output dtype
// that is not float32/bfloat16/bfloat8_b/bfloat4_b.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false,
              const MatmulOptions& options = {});
// The same into `output` (TT-NN's optional output tensor): reset to the result's shape and dtype,
// its storage kept when large enough. float32 and bfloat16 outputs get their valid rows only (the
// tile padding rows keep what the storage held: a decode step writes 1 row of 32, not the whole
// tiles); block-float outputs are written whole. output must be neither a nor b.
void matmul_into(const Tensor& a, const Tensor& b, Tensor& output, bool transpose_a = false, bool transpose_b = false,
                 const MatmulOptions& options = {});

// x [..., M, K] times w [K, N] (rank >= 2; w's leading dims broadcast like matmul's b) plus bias
// (nullptr, or any dtype/layout with N values: shape [N], [1, N], [1, 1, N] ...), then the fused
// activation (applied after the bias). Throws meshnn::Error as matmul does, and for a bias whose
// volume or last dim is not N.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr, Activation activation = Activation::NONE,
              const MatmulOptions& options = {});
// The same into `output`, as matmul_into (output must be neither x, w nor bias).
void linear_into(const Tensor& x, const Tensor& w, const Tensor* bias, Activation activation, Tensor& output,
                 const MatmulOptions& options = {});

// Which kernel path matmul takes for these operands: "avx512-bf16" or "bf16-emulated" (bfloat16
// products), else the instruction set of the float32 kernels ("avx512", "avx2", "portable").
// rows: M times the batches that share one weight matrix.
const char* matmul_kernel_path(DataType activation, DataType weight, int64_t rows, bool transpose_b = false,
                               const MatmulOptions& options = {});

// The activation applied elementwise in float32 (the fused epilogue of linear and the gelu/silu/
// relu ops use the same functions): gelu = x * Phi(x) with erf; gelu_tanh = 0.5 x (1 + tanh(
// sqrt(2/pi) (x + 0.044715 x^3))); silu = x / (1 + exp(-x)); relu = max(x, 0). At -inf all give
// the limit 0 (not NaN); at +inf, +inf.
float apply_activation(Activation activation, float x);
std::string_view to_string(Activation activation);  // "none", "gelu", "gelu_tanh", "silu", "relu"

}  // namespace meshnn
