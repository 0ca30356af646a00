// Cache blocking around the micro-kernels (BLIS's loop nest, with B decoded from its stored tiles
// instead of packed from float32):
//   for each MC block of rows: pack A (all K)     A panels [kc][mr] per K block
//     for each block of kNcTiles tile columns:    the C block (MC x 256) stays in L2
//       for each KC block of K:
//         for each tile column of B:              decode kc x 32 of B into an L1-resident panel
//           for each mr rows: micro-kernel        C[mr][32] += A_panel * B_panel
// B is decoded once per MC block of rows, so for M <= MC exactly once. The bf16 path runs the same
// loops on pairs of bfloat16 along K (Bf16Products below), and where the kernel set can, the first
// micro-kernel call of each panel decodes the panel as it goes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::kernels {

namespace {

// Block sizes (float32: tuned on a Sapphire Rapids core, 48 KiB L1d, 2 MiB L2; bf16: on Zen 5).
// K block: a multiple of 32 (whole tiles) whose B panel, kc x 32 values, fills about 32 KiB of L1,
// so that C is reloaded as rarely as the L1 allows (docs/performance.md, the bf16 section).
constexpr int64_t kKcFloat32 = 256;  // 256 x 32 floats
constexpr int64_t kKcBf16 = 512;     // 512 x 32 bfloat16 (256 rows of pairs)
constexpr int64_t kMc = 480;         // rows of A per block; the C block 480 x 256 floats = 480 KiB (L2)
constexpr int64_t kNcTiles = 8;      // tile columns per C block

template <class T>
T* align64(T* p) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

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

// What differs between float32 products and bfloat16 products in the blocked loop: the element
// type of the packed operands (a float, or a pair of bfloat16 along K), how A and B are packed,
// and the micro-kernel. Everything else (blocking, prefetching, the order of the sums) is shared.
struct Float32Products {
  using Element = float;
  static constexpr int64_t kValuesPerElement = 1;
  static constexpr int64_t kKc = kKcFloat32;
  static int max_mr(const KernelSet& ks) { return ks.max_mr; }
  static void pack(const KernelSet& ks, const float* a, int64_t lda, int64_t mc, int64_t kc, float* dst) {
    pack_a(a, lda, mc, kc, ks.max_mr, dst);
  }
  static void decode_panel(const KernelSet& ks, const TileMatrix& b, bool transposed, int64_t nt, int64_t k0,
                           int64_t kc, float* panel, float* scratch) {
    decode_b_panel(ks, b, transposed, nt, k0, kc, panel, scratch);
  }
  static bool first_call_decodes(const KernelSet&, const TileMatrix&, bool) { return false; }
  static void kernel_decoding(const KernelSet&, int, int64_t, const float*, const StoredPanel&, float*, float*, int64_t,
                              bool) {}
  static void kernel(const KernelSet& ks, int mr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                     bool accumulate) {
    ks.micro_kernel(mr, kc, a, b, c, ldc, accumulate);
  }
};

// A's values are bfloat16 held as float: the top 16 bits are the value.
inline uint16_t bf16_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<uint16_t>(bits >> 16);
}

// Where pair kk (of kc/2) of row i (of mr) goes in a micro-panel: [kc/2][mr], or [mr][kc/2] for
// a kernel set that reads A in rows (KernelSet::bf16_a_rows).
struct PairPanel {
  bool rows;
  int mr;
  int64_t kc;
  int64_t index(int i, int64_t kk) const { return rows ? i * (kc / 2) + kk : kk * mr + i; }
};

struct Bf16Products {
  using Element = uint32_t;
  static constexpr int64_t kValuesPerElement = 2;
  static constexpr int64_t kKc = kKcBf16;
  static int max_mr(const KernelSet& ks) { return ks.bf16_max_mr; }
  static void pack(const KernelSet& ks, const float* a, int64_t lda, int64_t mc, int64_t kc, uint32_t* dst) {
    const int max_mr = ks.bf16_max_mr;
    const int64_t panels = (mc + max_mr - 1) / max_mr;
    int64_t row = 0;
    for (int64_t p = 0; p < panels; ++p) {
      const int mr = micro_rows(mc, max_mr, p);
      const PairPanel panel{ks.bf16_a_rows, mr, kc};
      for (int64_t k = 0; k < kc; k += 2)
        for (int i = 0; i < mr; ++i) {
          const float* ai = a + (row + i) * lda + k;
          dst[panel.index(i, k / 2)] = bf16_pair(bf16_bits(ai[0]), bf16_bits(ai[1]));
        }
      dst += kc / 2 * mr;
      row += mr;
    }
  }
  static void decode_panel(const KernelSet& ks, const TileMatrix& b, bool, int64_t nt, int64_t k0, int64_t kc,
                           uint32_t* panel, float*) {
    for (int64_t kt = k0 / 32; kt < (k0 + kc) / 32; ++kt)
      ks.decode_tile_bf16_pairs(b.tile(kt, nt), b.dtype, panel + (kt * 32 - k0) / 2 * 32);
  }
  static void kernel(const KernelSet& ks, int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c,
                     int64_t ldc, bool accumulate) {
    ks.bf16_micro_kernel(mr, kc, a, b, c, ldc, accumulate);
  }
  // Whether each panel's first micro-kernel call decodes the panel itself, from the tiles
  // (KernelSet::bf16_micro_kernel_from_tiles), instead of decode_panel before the calls.
  static bool first_call_decodes(const KernelSet& ks, const TileMatrix&, bool transposed) {
    return ks.bf16_micro_kernel_from_tiles != nullptr && !transposed;
  }
  static void kernel_decoding(const KernelSet& ks, int mr, int64_t kc, const uint32_t* a, const StoredPanel& stored,
                              uint32_t* b, float* c, int64_t ldc, bool accumulate) {
    ks.bf16_micro_kernel_from_tiles(mr, kc, a, stored, b, c, ldc, accumulate);
  }
};

// mc rows of A, all of K: K block after K block, micro-panels inside each.
template <class P>
void pack_rows(const KernelSet& ks, const float* a, int64_t lda, int64_t mc, int64_t kp, typename P::Element* dst) {
  for (int64_t k0 = 0; k0 < kp; k0 += P::kKc)
    P::pack(ks, a + k0, lda, mc, std::min(P::kKc, kp - k0), dst + k0 * mc / P::kValuesPerElement);
}

// One piece of packed A: row block `piece / k_blocks`, K block `piece % k_blocks`. Pieces are
// independent, so the threads that later split N first split the packing (for 128 rows there is
// one row block, and packing it on one thread left the others waiting).
template <class P>
int64_t pack_pieces(int64_t m, int64_t kp) {
  return gemm_row_blocks(m) * ((kp + P::kKc - 1) / P::kKc);
}

// A piece's rows [i0, i0 + mc), its K block [k0, k0 + kc), and where its packed elements start.
struct PackPiece {
  int64_t i0, mc, k0, kc, packed_offset;
};

template <class P>
PackPiece pack_piece(int64_t m, int64_t kp, int64_t piece) {
  const int64_t k_blocks = (kp + P::kKc - 1) / P::kKc;
  const int64_t block = piece / k_blocks, k0 = piece % k_blocks * P::kKc;
  const int64_t i0 = row_block_begin(m, block), mc = row_block_begin(m, block + 1) - i0;
  return {i0, mc, k0, std::min(P::kKc, kp - k0), (i0 * kp + k0 * mc) / P::kValuesPerElement};
}

template <class P>
void pack_a_piece(const KernelSet& ks, int64_t m, const float* a, int64_t lda, int64_t kp, int64_t piece,
                  typename P::Element* packed) {
  const PackPiece pp = pack_piece<P>(m, kp, piece);
  P::pack(ks, a + pp.i0 * lda + pp.k0, lda, pp.mc, pp.kc, packed + pp.packed_offset);
}

// Bf16Products::pack reading A's bfloat16 values where its tiles store them. A tile's element
// index (tile_layout.hpp) is a sum of a row part and a column part, so `rows[i]` (row i's part,
// from the start of its tile row) plus tile_column_offset(k) addresses element (i, k). Columns k
// and k + 1 (k even) are neighbours in a face row: one 32-bit load is their pair. Columns from
// k_valid on are the tiles' padding, which may hold anything: packed as zeros.
constexpr int64_t tile_column_offset(int64_t k) { return k / 32 * kTileVolume + tile_element_index(0, k % 32); }

// One micro-panel of A's pairs (the panel's rows from rows[0]), one 32-bit store a pair: the
// portable packer, and the only one for sets that read A in rows (KernelSet::pack_bf16_a_panel).
void pack_pair_panel(const PairPanel& panel, const uint16_t* const* rows, int64_t k_valid, int64_t k0,
                     uint32_t* dst) {
  for (int64_t k = k0; k < k0 + panel.kc; k += 16) {  // one face row of each row: 8 pairs
    const int64_t valid = std::clamp<int64_t>(k_valid - k, 0, 16);
    for (int i = 0; i < panel.mr; ++i) {
      const uint16_t* src = rows[i] + tile_column_offset(k);
      uint32_t pairs[8];
      if (valid == 16) {
        std::memcpy(pairs, src, sizeof pairs);
      } else {
        uint16_t values[16] = {};
        std::memcpy(values, src, static_cast<size_t>(valid) * sizeof(uint16_t));
        std::memcpy(pairs, values, sizeof pairs);
      }
      for (int w = 0; w < 8; ++w) dst[panel.index(i, (k - k0) / 2 + w)] = pairs[w];
    }
  }
}

void pack_bf16_tile_rows(const KernelSet& ks, const uint16_t* const* rows, int64_t k_valid, int64_t k0, int64_t mc,
                         int64_t kc, uint32_t* dst) {
  const int max_mr = ks.bf16_max_mr;
  const int64_t panels = (mc + max_mr - 1) / max_mr;
  int64_t row = 0;
  for (int64_t p = 0; p < panels; ++p) {
    const int mr = micro_rows(mc, max_mr, p);
    if (ks.pack_bf16_a_panel != nullptr)
      ks.pack_bf16_a_panel(rows + row, mr, k_valid, k0, kc, dst);
    else
      pack_pair_panel({ks.bf16_a_rows, mr, kc}, rows + row, k_valid, k0, dst);
    dst += kc / 2 * mr;
    row += mr;
  }
}

// Whether the C rows of one micro-kernel call, ldc floats apart, crowd into so few L1 sets that
// they evict each other and the A and B panels: with ldc a multiple of 1024 floats every row's
// two lines fall into the same two sets, more lines than the sets have ways. L1d geometry of the
// CPUs meshnn runs on: 64 sets of 64-byte lines, 8 ways or more.
bool c_rows_crowd_l1(int64_t ldc, int rows) {
  constexpr int64_t kSets = 64, kWays = 8;
  int lines_in_set[kSets] = {};
  for (int r = 0; r < rows; ++r)
    for (int64_t line = 0; line < 2; ++line) {  // 32 floats: two lines
      const int64_t set = (r * ldc * static_cast<int64_t>(sizeof(float)) / 64 + line) % kSets;
      if (++lines_in_set[set] > kWays) return true;
    }
  return false;
}

template <class P>
void gemm_blocked(const KernelSet& ks, int64_t m, const float* a, int64_t lda, const typename P::Element* packed_a,
                  const TileMatrix& b, bool b_transposed, int64_t nt_begin, int64_t nt_end, float* c, int64_t ldc,
                  const CRowsDone* rows_done) {
  using Element = typename P::Element;
  constexpr int64_t kPerElement = P::kValuesPerElement;
  constexpr int64_t kKc = P::kKc;
  const int max_mr = P::max_mr(ks);
  const int64_t kp = (b_transposed ? b.tile_cols : b.tile_rows) * 32;
  // Per-thread buffers, reused across calls (each ThreadPool worker is a long-lived thread).
  thread_local std::vector<Element> a_block, b_panel;
  thread_local std::vector<float> scratch, c_scratch;
  b_panel.resize(kKc * 32 / kPerElement + 16);
  scratch.resize(32 * 32);
  // 64-byte alignment: every 512-bit load of the B panel then touches one cache line, not two.
  Element* panel = align64(b_panel.data());
  // Where the micro-kernels accumulate a row block's C: in place, or, when C's row stride would
  // crowd L1 (c_rows_crowd_l1), in a block of rows (kNcTiles + 0.5) tiles apart that is copied out
  // once its K blocks are done.
  const bool c_in_scratch = c_rows_crowd_l1(ldc, max_mr);
  const int64_t ldcs = kNcTiles * 32 + 16;
  const bool first_call_decodes = P::first_call_decodes(ks, b, b_transposed);
  // Tile (kt + 1, nt) lies one tile row after tile (kt, nt) (one tile when stored transposed).
  const ptrdiff_t tile_step = (b_transposed ? 1 : b.tile_cols) * static_cast<ptrdiff_t>(tile_bytes(b.dtype));

  const int64_t blocks = gemm_row_blocks(m);
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t i0 = row_block_begin(m, block), mc = row_block_begin(m, block + 1) - i0;
    const int64_t panels = (mc + max_mr - 1) / max_mr;
    // All of K for these rows, K block after K block (micro-panels inside each).
    const Element* a_packed;
    if (packed_a != nullptr) {
      a_packed = packed_a + i0 * kp / kPerElement;
    } else {
      a_block.resize(static_cast<size_t>(mc * kp / kPerElement) + 16);
      pack_rows<P>(ks, a + i0 * lda, lda, mc, kp, align64(a_block.data()));
      a_packed = align64(a_block.data());
    }
    if (c_in_scratch) c_scratch.resize(static_cast<size_t>(mc * ldcs) + 16);
    for (int64_t j0 = nt_begin; j0 < nt_end; j0 += kNcTiles) {
      const int64_t j1 = std::min(nt_end, j0 + kNcTiles);
      float* const c_block = c_in_scratch ? align64(c_scratch.data()) : c + i0 * ldc + j0 * 32;
      const int64_t ldcb = c_in_scratch ? ldcs : ldc;
      // The C block (mc x kNcTiles*32 floats) stays in L2 while every K block adds into it.
      for (int64_t k0 = 0; k0 < kp; k0 += kKc) {
        const int64_t kc = std::min(kKc, kp - k0);
        for (int64_t nt = j0; nt < j1; ++nt) {
          if (!first_call_decodes) P::decode_panel(ks, b, b_transposed, nt, k0, kc, panel, scratch.data());
          // The next panel's tiles (next tile column, or the first one of the next K block) come
          // from DRAM; fetch them into L2 before they are decoded: a slice per micro-kernel call,
          // or, where the first call decodes, in that call as it goes (StoredPanel).
          const bool last_column = nt + 1 == j1;
          const int64_t next_nt = last_column ? j0 : nt + 1, next_k0 = last_column ? k0 + kKc : k0;
          const int64_t next_tiles = next_k0 < kp ? std::min(kKc, kp - next_k0) / 32 : 0;
          const int64_t lines_per_tile = static_cast<int64_t>(tile_bytes(b.dtype)) / 64;
          const int64_t next_lines = first_call_decodes ? 0 : next_tiles * lines_per_tile;
          const std::byte* next_first = nullptr;
          if (next_tiles > 0) next_first = b_transposed ? b.tile(next_nt, next_k0 / 32) : b.tile(next_k0 / 32, next_nt);
          const StoredPanel stored{first_call_decodes ? b.tile(k0 / 32, nt) : nullptr, tile_step, b.dtype, next_first,
                                   next_tiles};
          const Element* ap = a_packed + k0 * mc / kPerElement;
          int64_t row = i0;
          for (int64_t p = 0; p < panels; ++p) {
            const int mr = micro_rows(mc, max_mr, p);
            const int64_t first = next_lines * p / panels, end = next_lines * (p + 1) / panels;
            const std::byte* tile = next_first + first / lines_per_tile * tile_step;
            int64_t offset = first % lines_per_tile * 64;
            for (int64_t line = first; line < end; ++line) {
              // To L2, not L1, where the A stream would evict it. Locality 1 (prefetcht2) rather
              // than 2 (prefetcht1): measured faster on Zen 4 (docs/performance.md, session 29);
              // Intel's cores take both into L2.
              __builtin_prefetch(tile + offset, 0, 1);
              offset += 64;
              if (offset == lines_per_tile * 64) {
                offset = 0;
                tile += tile_step;
              }
            }
            // Fetch the next micro-panel's C rows (ldc apart) while this one computes.
            float* const c_rows = c_block + (row - i0) * ldcb + (nt - j0) * 32;
            if (k0 > 0 && p + 1 < panels)
              for (int i = 0; i < mr; ++i) {
                const float* next = c_rows + (mr + i) * ldcb;
                __builtin_prefetch(next);
                __builtin_prefetch(next + 16);
              }
            if (p == 0 && first_call_decodes)
              P::kernel_decoding(ks, mr, kc, ap, stored, panel, c_rows, ldcb, k0 > 0);
            else
              P::kernel(ks, mr, kc, ap, panel, c_rows, ldcb, k0 > 0);
            if (rows_done != nullptr && k0 + kc == kp) (*rows_done)(c_rows, ldcb, row, mr, nt);
            ap += kc * mr / kPerElement;
            row += mr;
          }
        }
      }
      if (c_in_scratch) {
        const size_t row_bytes = static_cast<size_t>((j1 - j0) * 32) * sizeof(float);
        for (int64_t r = 0; r < mc; ++r) std::memcpy(c + (i0 + r) * ldc + j0 * 32, c_block + r * ldcs, row_bytes);
      }
    }
  }
}

}  // namespace

bool gemm_packs_a(const KernelSet& ks, int64_t m, bool b_transposed) { return b_transposed || m > ks.small_m_max; }

int64_t gemm_row_blocks(int64_t m) { return (m + kMc - 1) / kMc; }

int64_t gemm_c_block_tiles() { return kNcTiles; }

int64_t gemm_pack_pieces(int64_t m, int64_t kp, bool bf16) {
  return bf16 ? pack_pieces<Bf16Products>(m, kp) : pack_pieces<Float32Products>(m, kp);
}

void gemm_pack_a_piece(const KernelSet& ks, int64_t m, const float* a, int64_t lda, int64_t kp, int64_t piece,
                       float* packed) {
  pack_a_piece<Float32Products>(ks, m, a, lda, kp, piece, packed);
}

void gemm_pack_a_piece_bf16(const KernelSet& ks, int64_t m, const float* a, int64_t lda, int64_t kp, int64_t piece,
                            uint32_t* packed) {
  pack_a_piece<Bf16Products>(ks, m, a, lda, kp, piece, packed);
}

void gemm_pack_a_piece_bf16_tiles(const KernelSet& ks, int64_t m, const uint16_t* const* rows, int64_t k, int64_t kp,
                                  int64_t piece, uint32_t* packed) {
  const PackPiece pp = pack_piece<Bf16Products>(m, kp, piece);
  pack_bf16_tile_rows(ks, rows + pp.i0, k, pp.k0, pp.mc, pp.kc, packed + pp.packed_offset);
}

void gemm_tile_b(const KernelSet& ks, int64_t m, const float* a, int64_t lda, const float* packed_a,
                 const TileMatrix& b, bool b_transposed, int64_t nt_begin, int64_t nt_end, float* c, int64_t ldc,
                 const CRowsDone* rows_done) {
  if (m <= 0 || nt_end <= nt_begin) return;
  if (!gemm_packs_a(ks, m, b_transposed)) {
    ks.small_m(static_cast<int>(m), a, lda, b, nt_begin, nt_end, c, ldc);
    if (rows_done != nullptr)
      for (int64_t nt = nt_begin; nt < nt_end; ++nt) (*rows_done)(c + nt * 32, ldc, 0, static_cast<int>(m), nt);
    return;
  }
  gemm_blocked<Float32Products>(ks, m, a, lda, packed_a, b, b_transposed, nt_begin, nt_end, c, ldc, rows_done);
}

void gemm_tile_b_bf16(const KernelSet& ks, int64_t m, const float* a, int64_t lda, const uint32_t* packed_a,
                      const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c, int64_t ldc,
                      const CRowsDone* rows_done) {
  if (m <= 0 || nt_end <= nt_begin) return;
  if (ks.bf16_begin != nullptr) ks.bf16_begin();
  gemm_blocked<Bf16Products>(ks, m, a, lda, packed_a, b, false, nt_begin, nt_end, c, ldc, rows_done);
  if (ks.bf16_end != nullptr) ks.bf16_end();
}

bool small_m_bf16_applies(const KernelSet& ks, DataType a_dtype, DataType b_dtype, int64_t rows, bool b_transposed) {
  const bool weights = b_dtype == DataType::BFLOAT8_B || (b_dtype == DataType::BFLOAT4_B && ks.small_m_bf16_bfloat4);
  return ks.small_m_bf16 != nullptr && a_dtype == DataType::BFLOAT16 && weights && !b_transposed &&
         rows <= ks.small_m_bf16_max;
}

bool bf16_path_applies(const KernelSet& ks, DataType a_dtype, DataType b_dtype, int64_t rows, bool b_transposed) {
  const bool exact_in_bf16 =
      b_dtype == DataType::BFLOAT16 || b_dtype == DataType::BFLOAT8_B || b_dtype == DataType::BFLOAT4_B;
  // The small-M kernel on block floats takes a few rows more than small_m_max.
  return ks.bf16_micro_kernel != nullptr && a_dtype == DataType::BFLOAT16 && exact_in_bf16 && !b_transposed &&
         rows > ks.small_m_max && !small_m_bf16_applies(ks, a_dtype, b_dtype, rows, b_transposed);
}

}  // namespace meshnn::kernels
