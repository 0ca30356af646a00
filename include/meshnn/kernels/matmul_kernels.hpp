// Hot loops of matmul/linear over TILE-layout weights (internal to meshnn; ops/matmul.hpp is the
// public entry). Weights stay in their stored format: every kernel decodes B one 32x32 tile at a
// time into a small L1-resident float buffer (or straight into registers for small M).
//
// Five instruction sets are compiled into every binary and chosen at run time:
//   PORTABLE     plain C++ (whatever the baseline x86-64 / other target gives)
//   AVX2         AVX2 + FMA + F16C          (src/kernels/*_avx2.cpp)
//   AVX512       AVX-512F/BW/VL micro-kernel (src/kernels/*_avx512.cpp; decode shared with AVX2)
//   AVX512_BF16  AVX512 plus a bfloat16-product micro-kernel (src/kernels/*_avx512bf16.cpp)
//   AMX_BF16     AVX512_BF16 with the blocked bf16 micro-kernel on AMX tiles (matmul_amx.cpp)
// MESHNN_KERNELS=portable|avx2|avx512|avx512-bf16|amx-bf16 caps the choice (a request the CPU
// cannot run falls back to the best supported set below it).
//
// bfloat16 products (the "bf16 path"): when the activations are bfloat16 and the weights decode
// exactly to bfloat16 (bfloat16, bfloat8_b, bfloat4_b: their magnitudes have at most 7 bits), A
// and B are packed as pairs of bfloat16 along K and multiplied by vdpbf16ps, accumulating in
// float32, as TT-NN's own devices multiply. The same driver runs portable emulations of the
// instructions (emulated_bf16_kernel_set, emulated_amx_kernel_set), so the path's logic is tested
// on every machine.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meshnn/core/cpu_features.hpp"
#include "meshnn/core/function_ref.hpp"
#include "meshnn/core/types.hpp"

namespace meshnn::kernels {

// The instruction-set choice lives in core (the collectives' combines make it too).
using meshnn::active_isa;
using meshnn::best_supported_isa;
using meshnn::Isa;
using meshnn::reset_isa_cap;
using meshnn::set_isa_cap;
using meshnn::to_string;

// A matrix of 32x32 tiles as TT-NN stores one [Kp, Np] slice of a TILE tensor: tiles row-major
// over (tile row, tile column), each tile in face order, `tile_bytes(dtype)` bytes each.
struct TileMatrix {
  const std::byte* data = nullptr;
  DataType dtype = DataType::FLOAT32;  // FLOAT32, BFLOAT16, BFLOAT8_B or BFLOAT4_B
  int64_t tile_rows = 0;               // Kp / 32
  int64_t tile_cols = 0;               // Np / 32
  const std::byte* tile(int64_t tr, int64_t tc) const {
    return data + static_cast<size_t>(tr * tile_cols + tc) * tile_bytes(dtype);
  }
};

// A B panel (kc values of K by one tile column) where its tiles are stored: tile t of the kc/32 at
// first + t * step, in dtype (one decode_tile_bf16_pairs takes); and the panel that comes next,
// next_tiles tiles from next_first, the same step apart (none: next_tiles = 0).
struct StoredPanel {
  const std::byte* first;
  ptrdiff_t step;
  DataType dtype;
  const std::byte* next_first;
  int64_t next_tiles;
};

// One instruction set's inner loops.
struct KernelSet {
  Isa isa;
  // Decodes one tile into 32x32 row-major floats with row stride ld (>= 32).
  void (*decode_tile)(const std::byte* tile, DataType dtype, float* dst, int64_t ld);
  // C[mr][32] = (accumulate ? C : 0) + A_panel * B_panel, where A_panel is [kc][mr] (packed,
  // column of A per k), B_panel [kc][32] row-major; 1 <= mr <= max_mr; C row stride ldc.
  void (*micro_kernel)(int mr, int64_t kc, const float* a_panel, const float* b_panel, float* c, int64_t ldc,
                       bool accumulate);
  int max_mr;
  // Small-M path (m <= small_m_max): C[m][nt*32 .. nt_end*32) = A[m][0..Kp) * B over those tile
  // columns, streaming B tile row by tile row straight from its stored format (no panel buffer):
  // A row-major with stride lda and zeros beyond K; C row stride ldc (overwritten).
  void (*small_m)(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                  int64_t ldc);
  int small_m_max;
  // bfloat16 products with float32 accumulation, nullptr where this set has none:
  // C[mr][32] = (accumulate ? C : 0) + A_pairs * B_pairs over kc (even) values of K, where
  // A_pairs is [kc/2][mr] and B_pairs [kc/2][32], each uint32 a bf16_pair; 1 <= mr <= bf16_max_mr.
  void (*bf16_micro_kernel)(int mr, int64_t kc, const uint32_t* a_pairs, const uint32_t* b_pairs, float* c, int64_t ldc,
                            bool accumulate) = nullptr;
  int bf16_max_mr = 0;
  // bf16_micro_kernel for the first micro-panel of a B panel, or nullptr: the same C, with B read
  // from the panel's stored tiles and written to b_pairs as decode_tile_bf16_pairs would, for the
  // panel's later calls; on the way it fetches the next panel's tiles into L2.
  void (*bf16_micro_kernel_from_tiles)(int mr, int64_t kc, const uint32_t* a_pairs, const StoredPanel& panel,
                                       uint32_t* b_pairs, float* c, int64_t ldc, bool accumulate) = nullptr;
  // Decodes one tile (bfloat16, bfloat8_b or bfloat4_b: exact in bfloat16) into 16 rows of 32
  // bf16_pairs, row kk holding tile rows 2kk and 2kk + 1 (dst row stride 32).
  void (*decode_tile_bf16_pairs)(const std::byte* tile, DataType dtype, uint32_t* dst) = nullptr;
  // One micro-panel of A for bf16_micro_kernel, [kc/2][mr] pairs, from bfloat16 activations where
  // their tiles store them, or nullptr (gemm's portable packer): row i's part of its tile row
  // starts at rows[i]; K columns [k0, k0 + kc), k0 and kc multiples of 32, those from k_valid on
  // packed as zeros (the tiles' padding may hold anything). Not for bf16_a_rows sets.
  void (*pack_bf16_a_panel)(const uint16_t* const* rows, int mr, int64_t k_valid, int64_t k0, int64_t kc,
                            uint32_t* dst) = nullptr;
  // A's micro-panels for bf16_micro_kernel in rows, [mr][kc/2] pairs, instead of [kc/2][mr]: AMX
  // loads A a row of pairs at a time.
  bool bf16_a_rows = false;
  // Called on a thread before and after each blocked bf16 product, or nullptr: AMX's tile
  // configuration is made afresh for each product (other code on the thread, oneDNN in the kernel
  // bench, configures the tiles too) and released after it.
  void (*bf16_begin)() = nullptr;
  void (*bf16_end)() = nullptr;
  const char* bf16_path = nullptr;  // the path's name in reports: "avx512-bf16", "bf16-emulated"
  // The small-M path for A's values in bfloat16 (held as float) and bfloat8_b weights (bfloat4_b
  // too where small_m_bf16_bfloat4), nullptr where this set has none: small_m's contract, the
  // products in bfloat16 (vdpbf16ps). The products are exact as in small_m; the sums round
  // differently.
  void (*small_m_bf16)(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                       float* c, int64_t ldc) = nullptr;
  bool small_m_bf16_bfloat4 = false;
  // The rows small_m_bf16 takes: more than small_m_max, since from 3 rows its one product per
  // weight and row beats the blocked path's panel decode.
  int small_m_bf16_max = 0;
  const char* small_m_bf16_path = nullptr;  // its name in reports
};

// How the small-M kernels walk B's tiles (the AVX-512 ones; kernels/avx512_decode.hpp). They read
// each weight once per call, so on a decode step the memory system sets their speed, and the
// order that streams fastest differs between CPUs:
//   LINEAR          tile row after tile row, memory order, left to the hardware prefetchers. AMD
//                   Zen 5: about 1.5-2x the other walk's rate from DRAM (docs/performance.md).
//   ROWS_IN_FLIGHT  4 tile rows at once, each a forward stream, software prefetch ahead of each:
//                   best on Intel Sapphire Rapids (docs/design-measurements.md §14).
// Default LINEAR on AMD CPUs, ROWS_IN_FLIGHT on others; MESHNN_SMALL_M_WALK=linear|rows overrides
// it (read once per process), set_small_m_walk in tests and benchmarks. Both give the same bits:
// every output column meets its tiles in the same order.
enum class SmallMWalk { LINEAR, ROWS_IN_FLIGHT };
SmallMWalk small_m_walk();
const char* to_string(SmallMWalk walk);  // "linear", "rows"
void set_small_m_walk(SmallMWalk walk);  // process-wide, over MESHNN_SMALL_M_WALK
void reset_small_m_walk();

// Two bfloat16 values along K in one 32-bit word, as vdpbf16ps reads them: element k (even) in
// the low 16 bits, k + 1 in the high 16 bits.
inline uint32_t bf16_pair(uint16_t even, uint16_t odd) { return uint32_t{even} | uint32_t{odd} << 16; }

// One float32 lane of vdpbf16ps, exactly as the instruction computes it (Intel SDM): the odd
// products first, then the even, each added to the accumulator with one rounding to nearest even
// (bfloat16 x bfloat16 is exact in float32, so each step is one fused multiply-add); denormal
// inputs (bfloat16 operands and the accumulator) count as zero and denormal results are flushed
// to zero of the same sign; MXCSR is neither read nor written.
float dpbf16_lane(float acc, uint32_t a_pair, uint32_t b_pair);

// One row of AMX's tdpbf16ps, exactly as the Intel SDM's pseudo-code computes it: C[n] for n <
// n_cols, from A's k_pairs pairs (a_row) and B's rows of pairs (b[k * b_stride + n]). The even
// products and the odd products are summed in two separate chains over k, each step one fused
// multiply-add rounded to nearest even; then C[n] + (even + odd). Denormal inputs (bfloat16
// operands and C) count as zero and denormal results are flushed, as in dpbf16_lane.
void tdpbf16ps_row(float* c, int n_cols, const uint32_t* a_row, int k_pairs, const uint32_t* b, int64_t b_stride);

// The set for isa. For AMX_BF16 that is amx_bf16_kernel_set() once its micro-kernel has passed
// bf16_micro_kernel_exact on this CPU (checked once per process); if it fails, a warning goes to
// stderr and avx512-bf16's set serves instead, so a tile path that misbehaves on some CPU costs
// speed, not wrong results. (The AMX path is otherwise tested against its emulation, which follows
// the SDM's pseudo-code; this check holds on real tiles whatever order they add in.)
const KernelSet& kernel_set(Isa isa);
// Whether set's bf16_micro_kernel gives exact results on this CPU at each tile shape, both
// accumulate modes and K blocks of 32 and 96 values: small integer operands (exact in bfloat16,
// every sum exact in float32 in any order), compared bit for bit with integer arithmetic, and C's
// neighbouring row and columns checked untouched (kernels/bf16_self_check.cpp).
bool bf16_micro_kernel_exact(const KernelSet& set);
// candidate if it passes bf16_micro_kernel_exact, else fallback, with a warning on stderr that
// names both paths (how kernel_set treats the AMX set).
const KernelSet& kernel_set_if_exact(const KernelSet& candidate, const KernelSet& fallback);

// Per-ISA tables (defined in the matching source files).
const KernelSet& portable_kernel_set();
const KernelSet& avx2_kernel_set();
const KernelSet& avx512_kernel_set();
const KernelSet& avx512_bf16_kernel_set();  // avx512's float32 kernels plus vdpbf16ps
// The same with the decode rows' bfloat8_b kernel that avx512_bf16_kernel_set takes where the CPU
// lacks AVX512-VBMI (a word permute instead of a byte permute; the same bits, which tests check),
// and none for bfloat4_b (its decode rows keep float32 products there).
const KernelSet& avx512_bf16_kernel_set_without_vbmi();
// The portable set plus the bf16 path through dpbf16_lane: the same packing, blocking and
// accumulation order as avx512-bf16, so both give the same bits (tests compare them).
const KernelSet& emulated_bf16_kernel_set();
const KernelSet& amx_bf16_kernel_set();  // avx512-bf16's kernels, the blocked bf16 products on AMX tiles
// emulated_bf16_kernel_set with the blocked bf16 products through the AMX micro-kernel on emulated
// tiles (tdpbf16ps_row): amx-bf16's bits on any CPU.
const KernelSet& emulated_amx_kernel_set();

// Scale of a block-float code: value = signed magnitude * block_float_scale(E, W).
// 2^(E - 127 - (W - 1)), exact (denormal scales included).
float block_float_scale(int exponent, int mantissa_bits);
// 256-entry tables (index: shared exponent byte) for W = 7 and W = 3.
const float* block_float_scale_table(DataType dtype);

// C's rows [row, row + rows) of tile column nt are final: their 32 values each at c, row stride
// ldc (in C, or in the block of C the blocked loop accumulates elsewhere, which is copied into C
// later). Heard as soon as the micro-kernel call that adds their last K block returns, the values
// still in L1: an epilogue that writes them out then has its stores drain behind the next
// products, where a pass after the kernels wrote the output with nothing to hide it behind.
using CRowsDone = FunctionRef<void(const float* c, int64_t ldc, int64_t row, int rows, int64_t nt)>;

// C = A * B for the tile columns [nt_begin, nt_end) of B (C and A as in small_m: A row-major
// [m][Kp] with zeros beyond K, C row-major with stride ldc, written in full for those columns).
// B may be stored transposed (`b_transposed`: the tiles hold B^T, i.e. tile_rows counts N).
// Chooses the small-M path or runs the micro-kernel over decoded B panels with A packed into
// micro-panels: by the caller (packed_a from gemm_pack_a_piece, shared by threads that split N)
// or, when packed_a is nullptr, by this call into a per-thread buffer.
// rows_done, where given, hears of every row of every tile column of the call once, as soon as
// those values of C are final (see CRowsDone).
void gemm_tile_b(const KernelSet& ks, int64_t m, const float* a, int64_t lda, const float* packed_a,
                 const TileMatrix& b, bool b_transposed, int64_t nt_begin, int64_t nt_end, float* c, int64_t ldc,
                 const CRowsDone* rows_done = nullptr);

// Whether gemm_tile_b uses packed A for this M (else it reads A's rows directly).
bool gemm_packs_a(const KernelSet& ks, int64_t m, bool b_transposed);
int64_t gemm_row_blocks(int64_t m);
int64_t gemm_c_block_tiles();  // tile columns of C the blocked loop finishes together
// Packed A is m * kp floats (m * kp / 2 pairs with bf16) in gemm_pack_pieces(m, kp, bf16)
// independent pieces, a row block by a K block each, for threads to pack in parallel.
int64_t gemm_pack_pieces(int64_t m, int64_t kp, bool bf16);
void gemm_pack_a_piece(const KernelSet& ks, int64_t m, const float* a, int64_t lda, int64_t kp, int64_t piece,
                       float* packed);

// The bf16 path's gemm_tile_b: A's values must be bfloat16 values held as float (they are
// truncated to bfloat16, exactly), B bfloat16, bfloat8_b or bfloat4_b (not transposed); packed_a
// (from gemm_pack_a_piece_bf16) or nullptr.
// Requires ks.bf16_micro_kernel.
void gemm_tile_b_bf16(const KernelSet& ks, int64_t m, const float* a, int64_t lda, const uint32_t* packed_a,
                      const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c, int64_t ldc,
                      const CRowsDone* rows_done = nullptr);
void gemm_pack_a_piece_bf16(const KernelSet& ks, int64_t m, const float* a, int64_t lda, int64_t kp, int64_t piece,
                            uint32_t* packed);
// The same piece packed straight from bfloat16 tiles, without A's rows in float32 first: row i's
// values start at rows[i] (its tile row's first tile, plus tile_element_index(i % 32, 0)); columns
// from k on (the tiles' padding) are packed as zeros.
void gemm_pack_a_piece_bf16_tiles(const KernelSet& ks, int64_t m, const uint16_t* const* rows, int64_t k, int64_t kp,
                                  int64_t piece, uint32_t* packed);
// Whether ks.small_m_bf16 takes these operands: bfloat16 activations, bfloat8_b weights (or
// bfloat4_b where ks.small_m_bf16_bfloat4) not transposed, at most ks.small_m_bf16_max rows.
bool small_m_bf16_applies(const KernelSet& ks, DataType a_dtype, DataType b_dtype, int64_t rows, bool b_transposed);
// Whether a matmul of these operands can take the bf16 path of `ks` (products exact in bfloat16,
// rows enough to amortise the packing: the small-M kernels stream faster), not the small-M path
// (small_m_bf16_applies).
bool bf16_path_applies(const KernelSet& ks, DataType a_dtype, DataType b_dtype, int64_t rows, bool b_transposed);

}  // namespace meshnn::kernels
