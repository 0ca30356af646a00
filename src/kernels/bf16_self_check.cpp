// A bf16 micro-kernel checked on this CPU before it is used (matmul_kernels.hpp,
// bf16_micro_kernel_exact). The operands are small integers: their bfloat16 values are exact, and
// every product and partial sum stays far below 2^24, so float32 holds each exactly whatever
// order the hardware adds them in. A correct kernel therefore gives the integer answer bit for bit
// while a wrong tile shape, stride, operand order or accumulate flag does not, and the check does
// not depend on rounding rules that only the hardware itself can confirm.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/tensor/bfloat16.hpp"

namespace meshnn::kernels {

namespace {

constexpr int kCols = 32;        // a micro-kernel's C: mr rows by 32 columns
constexpr int64_t kLdc = 40;     // C's row stride: columns 32-39 are guards the kernel must not touch
constexpr float kGuard = -7777.0f;

// bfloat16 of a small integer (exact: |v| <= 256 needs 8 significant bits).
uint16_t bf16_of(int v) { return float_to_bfloat16(static_cast<float>(v)); }

// Values in [-4, 4] from a fixed-seed engine: the same on every rank and run.
struct SmallInts {
  std::minstd_rand engine{20261207u};
  int next() { return static_cast<int>(engine() % 9) - 4; }
};

bool one_call_exact(const KernelSet& set, int mr, int64_t kc, bool accumulate, SmallInts& values) {
  const int64_t pairs = kc / 2;
  std::vector<int> a(static_cast<size_t>(mr * kc)), b(static_cast<size_t>(kc * kCols));
  for (int& v : a) v = values.next();
  for (int& v : b) v = values.next();
  // A's pairs in the set's micro-panel layout, B's as [kc/2][32].
  std::vector<uint32_t> a_pairs(static_cast<size_t>(mr * pairs)), b_pairs(static_cast<size_t>(pairs * kCols));
  for (int i = 0; i < mr; ++i)
    for (int64_t kk = 0; kk < pairs; ++kk) {
      const size_t at = set.bf16_a_rows ? static_cast<size_t>(i * pairs + kk) : static_cast<size_t>(kk * mr + i);
      a_pairs[at] = bf16_pair(bf16_of(a[i * kc + 2 * kk]), bf16_of(a[i * kc + 2 * kk + 1]));
    }
  for (int64_t kk = 0; kk < pairs; ++kk)
    for (int n = 0; n < kCols; ++n)
      b_pairs[kk * kCols + n] = bf16_pair(bf16_of(b[2 * kk * kCols + n]), bf16_of(b[(2 * kk + 1) * kCols + n]));
  // One row beyond mr and the guard columns must come back untouched; without accumulate, C's
  // prior contents (NaN) must not reach the result.
  std::vector<float> c(static_cast<size_t>((mr + 1) * kLdc), kGuard);
  std::vector<int64_t> want(static_cast<size_t>(mr * kCols), 0);
  for (int i = 0; i < mr; ++i)
    for (int n = 0; n < kCols; ++n) {
      const int prior = values.next();
      c[i * kLdc + n] = accumulate ? static_cast<float>(prior) : std::nanf("");
      int64_t sum = accumulate ? prior : 0;
      for (int64_t k = 0; k < kc; ++k) sum += int64_t{a[i * kc + k]} * b[k * kCols + n];
      want[i * kCols + n] = sum;
    }
  if (set.bf16_begin != nullptr) set.bf16_begin();
  set.bf16_micro_kernel(mr, kc, a_pairs.data(), b_pairs.data(), c.data(), kLdc, accumulate);
  if (set.bf16_end != nullptr) set.bf16_end();
  for (int i = 0; i <= mr; ++i)
    for (int64_t n = 0; n < kLdc; ++n) {
      const bool computed = i < mr && n < kCols;
      const float expected = computed ? static_cast<float>(want[i * kCols + n]) : kGuard;
      if (c[i * kLdc + n] != expected) return false;
    }
  return true;
}

}  // namespace

bool bf16_micro_kernel_exact(const KernelSet& set) {
  if (set.bf16_micro_kernel == nullptr || set.bf16_max_mr < 1) return false;
  SmallInts values;
  // Row counts that take each tile shape AMX configures (one partial tile row, one full, a full
  // and a partial, two full) and the set's largest; K blocks of one and three 32-value steps.
  for (const int rows : {1, 5, 16, 17, 20, 32, set.bf16_max_mr}) {
    if (rows > set.bf16_max_mr) continue;
    for (const int64_t kc : {int64_t{32}, int64_t{96}})
      for (const bool accumulate : {false, true})
        if (!one_call_exact(set, rows, kc, accumulate, values)) return false;
  }
  return true;
}

}  // namespace meshnn::kernels
