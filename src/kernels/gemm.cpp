// Cache blocking around the micro-kernels (BLIS's loop nest, with B decoded from its stored tiles
// instead of packed from float32):
//   for each MC block of rows: pack A (all K)     A panels [kc][mr] per K block
//     for each block of kNcTiles tile columns:    the C block (MC x 256) stays in L2
//       for each KC block of K:
//         for each tile column of B:              decode kc x 32 of B into an L1-resident panel
//           for each mr rows: micro-kernel        C[mr][32] += A_panel * B_panel
// B is decoded once per MC block of rows, so for M <= MC exactly once.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

namespace {

// Block sizes (tuned on a Sapphire Rapids core: 48 KiB L1d, 2 MiB L2).
constexpr int64_t kKc = 256;     // multiple of 32 (whole tiles); B panel 256 x 32 floats = 32 KiB (L1)
constexpr int64_t kMc = 480;     // rows of A per block; the C block 480 x 256 floats = 480 KiB (L2)
constexpr int64_t kNcTiles = 8;  // tile columns per C block

float* align64(float* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63}); }

// Row blocks of A split M evenly (2048 rows -> 5 blocks of 409-410, not 4 x 480 + 128).
int64_t row_block_begin(int64_t m, int64_t block) {
  const int64_t blocks = (m + kMc - 1) / kMc;
  return m * block / blocks;
}

// Splits mc rows into ceil(mc / max_mr) micro-panels of near-equal height, so M = 32 runs as
// e.g. 11 + 11 + 10 rows rather than 14 + 14 + 4.
int micro_rows(int64_t mc, int max_mr, int64_t panel) {
  const int64_t panels = (mc + max_mr - 1) / max_mr;
  return static_cast<int>(mc / panels + (panel < mc % panels ? 1 : 0));
}

void pack_a(const float* a, int64_t lda, int64_t mc, int64_t kc, int max_mr, float* dst) {
  const int64_t panels = (mc + max_mr - 1) / max_mr;
  int64_t row = 0;
  for (int64_t p = 0; p < panels; ++p) {
    const int mr = micro_rows(mc, max_mr, p);
    for (int64_t k = 0; k < kc; ++k)
      for (int i = 0; i < mr; ++i) dst[k * mr + i] = a[(row + i) * lda + k];
    dst += kc * mr;
    row += mr;
  }
}

// mc rows of A, all of K: K block after K block, [kc][mr] micro-panels inside each.
void pack_rows(const float* a, int64_t lda, int64_t mc, int64_t kp, int max_mr, float* dst) {
  for (int64_t k0 = 0; k0 < kp; k0 += kKc) pack_a(a + k0, lda, mc, std::min(kKc, kp - k0), max_mr, dst + k0 * mc);
}

void decode_b_panel(const KernelSet& ks, const TileMatrix& b, bool transposed, int64_t nt, int64_t k0, int64_t kc,
                    float* panel, float* scratch) {
  for (int64_t kt = k0 / 32; kt < (k0 + kc) / 32; ++kt) {
    float* dst = panel + (kt * 32 - k0) * 32;
    if (!transposed) {
      ks.decode_tile(b.tile(kt, nt), b.dtype, dst, 32);
    } else {
      // Stored tile (nt, kt) holds B^T: decode, then transpose into the panel.
      ks.decode_tile(b.tile(nt, kt), b.dtype, scratch, 32);
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j) dst[i * 32 + j] = scratch[j * 32 + i];
    }
  }
}

}  // namespace

bool gemm_packs_a(const KernelSet& ks, int64_t m, bool b_transposed) { return b_transposed || m > ks.small_m_max; }

int64_t gemm_row_blocks(int64_t m) { return (m + kMc - 1) / kMc; }

void gemm_pack_a_block(const KernelSet& ks, int64_t m, const float* a, int64_t lda, int64_t kp, int64_t block,
                       float* packed) {
  const int64_t i0 = row_block_begin(m, block), mc = row_block_begin(m, block + 1) - i0;
  pack_rows(a + i0 * lda, lda, mc, kp, ks.max_mr, packed + i0 * kp);
}

void gemm_tile_b(const KernelSet& ks, int64_t m, const float* a, int64_t lda, const float* packed_a,
                 const TileMatrix& b, bool b_transposed, int64_t nt_begin, int64_t nt_end, float* c, int64_t ldc) {
  if (m <= 0 || nt_end <= nt_begin) return;
  if (!gemm_packs_a(ks, m, b_transposed)) {
    ks.small_m(static_cast<int>(m), a, lda, b, nt_begin, nt_end, c, ldc);
    return;
  }
  const int64_t kp = (b_transposed ? b.tile_cols : b.tile_rows) * 32;
  // Per-thread buffers, reused across calls (each ThreadPool worker is a long-lived thread).
  thread_local std::vector<float> a_block, b_panel, scratch;
  b_panel.resize(kKc * 32 + 16);
  scratch.resize(32 * 32);
  // 64-byte alignment: every 512-bit load of the B panel then touches one cache line, not two.
  float* panel = align64(b_panel.data());

  const int64_t blocks = gemm_row_blocks(m);
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t i0 = row_block_begin(m, block), mc = row_block_begin(m, block + 1) - i0;
    const int64_t panels = (mc + ks.max_mr - 1) / ks.max_mr;
    // All of K for these rows, K block after K block ([kc][mr] micro-panels inside each).
    const float* a_packed;
    if (packed_a != nullptr) {
      a_packed = packed_a + i0 * kp;
    } else {
      a_block.resize(static_cast<size_t>(mc * kp) + 16);
      pack_rows(a + i0 * lda, lda, mc, kp, ks.max_mr, align64(a_block.data()));
      a_packed = align64(a_block.data());
    }
    for (int64_t j0 = nt_begin; j0 < nt_end; j0 += kNcTiles) {
      const int64_t j1 = std::min(nt_end, j0 + kNcTiles);
      // The C block (mc x kNcTiles*32 floats) stays in L2 while every K block adds into it.
      for (int64_t k0 = 0; k0 < kp; k0 += kKc) {
        const int64_t kc = std::min(kKc, kp - k0);
        for (int64_t nt = j0; nt < j1; ++nt) {
          decode_b_panel(ks, b, b_transposed, nt, k0, kc, panel, scratch.data());
          // The next panel's tiles (next tile column, or the first one of the next K block) come
          // from DRAM; fetch them a slice per micro-kernel call so the decode does not wait.
          const bool last_column = nt + 1 == j1;
          const int64_t next_nt = last_column ? j0 : nt + 1, next_k0 = last_column ? k0 + kKc : k0;
          const int64_t next_tiles = next_k0 < kp ? std::min(kKc, kp - next_k0) / 32 : 0;
          const int64_t lines_per_tile = static_cast<int64_t>(tile_bytes(b.dtype)) / 64;
          const int64_t next_lines = next_tiles * lines_per_tile;
          const float* ap = a_packed + k0 * mc;
          int64_t row = i0;
          for (int64_t p = 0; p < panels; ++p) {
            const int mr = micro_rows(mc, ks.max_mr, p);
            for (int64_t line = next_lines * p / panels; line < next_lines * (p + 1) / panels; ++line) {
              const int64_t t = next_k0 / 32 + line / lines_per_tile;
              const std::byte* tile = b_transposed ? b.tile(next_nt, t) : b.tile(t, next_nt);
              __builtin_prefetch(tile + (line % lines_per_tile) * 64);
            }
            // Fetch the next micro-panel's C rows (ldc apart) while this one computes.
            if (k0 > 0 && p + 1 < panels)
              for (int i = 0; i < mr; ++i) {
                const float* next = c + (row + mr + i) * ldc + nt * 32;
                __builtin_prefetch(next);
                __builtin_prefetch(next + 16);
              }
            ks.micro_kernel(mr, kc, ap, panel, c + row * ldc + nt * 32, ldc, k0 > 0);
            ap += kc * mr;
            row += mr;
          }
        }
      }
    }
  }
}

}  // namespace meshnn::kernels
