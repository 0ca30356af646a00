// The AMX-BF16 micro-kernel on the hardware's tiles (amx_micro_kernel.hpp holds the kernel; this
// file the tile instructions). Run only after best_supported_isa() found AMX-TILE and AMX-BF16
// and Linux granted the process the tile state. The instructions are written as inline assembly
// with the tile number an immediate operand (%c), because the compilers' intrinsics take tile
// numbers only as literal constants, not template arguments; the assembler (binutils >= 2.36)
// knows them, so no -mamx flags are needed.
#include <cstdint>
#include <cstring>

#include "amx_micro_kernel.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

// ldtilecfg's 64-byte operand (palette 1): bytes per row and rows of each tile.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

struct HardwareTiles {
  // The shape loaded on this thread, so that a product's micro-panels (whose heights differ by at
  // most one row) reload it only when it changes; forgotten at each product's start (bf16_begin).
  static amx::TileShape& loaded() {
    thread_local amx::TileShape shape{-1, -1};
    return shape;
  }
  static void begin() { loaded() = {-1, -1}; }
  static void release() {
    __asm__ volatile("tilerelease" ::: "memory");
    loaded() = {-1, -1};
  }
  static void configure(amx::TileShape shape) {
    if (loaded() == shape) return;
    TileConfig config;
    const int rows[8] = {shape.r0, shape.r0, shape.r1, shape.r1, shape.r0, shape.r1, 16, 16};
    for (int t = 0; t < 8; ++t) {
      config.rows[t] = static_cast<uint8_t>(rows[t]);
      config.colsb[t] = rows[t] > 0 ? 64 : 0;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(config) : "memory");
    loaded() = shape;
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int C, int A, int B>
  static void dot() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
};

#endif

}  // namespace

const KernelSet& amx_bf16_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = avx512_bf16_kernel_set();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    s.isa = Isa::AMX_BF16;
    s.bf16_micro_kernel = amx::micro_kernel<HardwareTiles>;
    s.bf16_micro_kernel_from_tiles = nullptr;  // A in rows: the vdpbf16ps set's first call does not apply
    s.bf16_max_mr = 32;
    s.bf16_a_rows = true;
    s.pack_bf16_a_panel = nullptr;  // the vdpbf16ps set's packer writes [kc/2][mr], at most 16 rows
    s.bf16_begin = HardwareTiles::begin;
    s.bf16_end = HardwareTiles::release;
    s.bf16_path = "amx-bf16";
#endif
    return s;
  }();
  return set;
}

}  // namespace meshnn::kernels
