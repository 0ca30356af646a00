// The AMX-BF16 micro-kernel on emulated tiles: eight tiles of up to 16 rows of 64 bytes per
// thread, configured, loaded, multiplied (tdpbf16ps_row, the SDM's pseudo-code) and stored as the
// hardware does, so emulated_amx_kernel_set() computes amx-bf16's bits on any CPU.
#include <cstring>

#include "amx_micro_kernel.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

namespace {

struct EmulatedTiles {
  struct State {
    uint32_t data[8][16][16];  // [tile][row][dword]
    int rows[8] = {};          // 0: not configured
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static void configure(amx::TileShape shape) {
    State& s = state();
    const int rows[8] = {shape.r0, shape.r0, shape.r1, shape.r1, shape.r0, shape.r1, 16, 16};
    std::memcpy(s.rows, rows, sizeof rows);
    std::memset(s.data, 0, sizeof s.data);  // ldtilecfg zeroes the tiles
  }
  static void release() { state() = State{}; }
  template <int T>
  static void load(const void* p, int64_t stride) {
    State& s = state();
    for (int r = 0; r < s.rows[T]; ++r) std::memcpy(s.data[T][r], static_cast<const char*>(p) + r * stride, 64);
  }
  template <int T>
  static void zero() {
    std::memset(state().data[T], 0, sizeof state().data[T]);
  }
  template <int C, int A, int B>
  static void dot() {
    State& s = state();
    // A's rows of 16 pairs against B's 16 rows of 16 pairs: a 16 x 32 by 32 x 16 product.
    for (int m = 0; m < s.rows[C]; ++m) {
      float c[16];
      std::memcpy(c, s.data[C][m], sizeof c);
      tdpbf16ps_row(c, 16, s.data[A][m], 16, &s.data[B][0][0], 16);
      std::memcpy(s.data[C][m], c, sizeof c);
    }
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    State& s = state();
    for (int r = 0; r < s.rows[T]; ++r) std::memcpy(static_cast<char*>(p) + r * stride, s.data[T][r], 64);
  }
};

}  // namespace

const KernelSet& emulated_amx_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = emulated_bf16_kernel_set();
    s.bf16_micro_kernel = amx::micro_kernel<EmulatedTiles>;
    s.bf16_max_mr = 32;
    s.bf16_a_rows = true;
    s.bf16_micro_kernel_from_tiles = nullptr;  // A in rows: the vdpbf16ps set's first call does not apply
    s.bf16_end = EmulatedTiles::release;
    s.bf16_path = "amx-emulated";
    return s;
  }();
  return set;
}

}  // namespace meshnn::kernels
