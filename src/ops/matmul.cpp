// matmul / linear: validate once, lay the activations out as float rows, run the tile kernels on
// the rank's threads, then one fused epilogue (bias, activation, output format) per output tile.
#include "meshnn/ops/matmul.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "broadcast.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/process_context.hpp"
#include "meshnn/core/scratch.hpp"
#include "meshnn/core/trace.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/storage_codec.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {

float apply_activation(Activation activation, float x) {
  // gelu and silu at -inf: the limit -0 rather than -inf * 0 = NaN.
  if (activation != Activation::NONE && x == -std::numeric_limits<float>::infinity()) return -0.0f;
  switch (activation) {
    case Activation::NONE:
      return x;
    case Activation::GELU:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Activation::GELU_TANH: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case Activation::SILU:
      // exp(-x) overflows to inf for x < -88: x / inf = -0, the right limit.
      return x / (1.0f + std::exp(-x));
    case Activation::RELU:
      return x > 0.0f ? x : 0.0f;
  }
  return x;
}

std::string_view to_string(Activation activation) {
  switch (activation) {
    case Activation::NONE:
      return "none";
    case Activation::GELU:
      return "gelu";
    case Activation::GELU_TANH:
      return "gelu_tanh";
    case Activation::SILU:
      return "silu";
    case Activation::RELU:
      return "relu";
  }
  return "?";
}

namespace {

using ops_detail::BroadcastIndex;

std::span<const int64_t> batch_dims(const Shape& s) { return s.dims().first(static_cast<size_t>(s.rank() - 2)); }

// Stored tile row `i` of one batch of `a`, decoded into float rows dst [M][lda] (transposed when a
// is stored [K, M]), with zeros in the K padding. Works from the tiles directly so a bfloat16
// activation is decoded once. Tile rows are independent, so threads can share the work.
void load_a_tile_row(const kernels::KernelSet& ks, const Tensor& a, int64_t batch, int64_t i, bool transposed,
                     int64_t m, int64_t k, float* dst, int64_t lda) {
  const Shape padded = a.padded_shape();
  const int64_t tr = padded[-2] / 32, tc = padded[-1] / 32;
  const kernels::TileMatrix tiles{a.data<std::byte>() + static_cast<size_t>(batch * tr * tc) * tile_bytes(a.dtype()),
                                  a.dtype(), tr, tc};
  alignas(64) float tile[32 * 32];
  const int64_t r_end = std::min<int64_t>(32, (transposed ? k : m) - i * 32);
  for (int64_t j = 0; j < tc; ++j) {
    const int64_t c_end = std::min<int64_t>(32, (transposed ? m : k) - j * 32);
    if (!transposed && r_end == 32) {
      ks.decode_tile(tiles.tile(i, j), a.dtype(), dst + i * 32 * lda + j * 32, lda);  // lda >= kp: fits
    } else if (!transposed) {
      // Last tile row: only r_end rows belong to this batch (the next batch's rows follow).
      ks.decode_tile(tiles.tile(i, j), a.dtype(), tile, 32);
      for (int64_t r = 0; r < r_end; ++r)
        std::copy(tile + r * 32, tile + r * 32 + 32, dst + (i * 32 + r) * lda + j * 32);
    } else {
      ks.decode_tile(tiles.tile(i, j), a.dtype(), tile, 32);
      for (int64_t r = 0; r < r_end; ++r)
        for (int64_t c = 0; c < c_end; ++c) dst[(j * 32 + c) * lda + i * 32 + r] = tile[r * 32 + c];
    }
  }
  // The tile padding may hold any pad value: the kernels need zeros beyond K.
  if (!transposed) {
    for (int64_t r = 0; r < r_end; ++r) std::fill(dst + (i * 32 + r) * lda + k, dst + (i * 32 + r + 1) * lda, 0.0f);
  } else if (i == tr - 1) {
    for (int64_t row = 0; row < m; ++row) std::fill(dst + row * lda + k, dst + (row + 1) * lda, 0.0f);
  }
}

const kernels::KernelSet& kernel_set_for(const MatmulOptions& options) {
  if (options.emulate_bf16 == MatmulOptions::Bf16Emulation::VDPBF16PS) return kernels::emulated_bf16_kernel_set();
  if (options.emulate_bf16 == MatmulOptions::Bf16Emulation::TDPBF16PS) return kernels::emulated_amx_kernel_set();
  return kernels::kernel_set(options.force_portable ? kernels::Isa::PORTABLE : kernels::active_isa());
}

// Work (FLOPs, or ~8 per A value for the preparation phases) below which a phase stays on one
// thread: 2 MFLOP per thread.
constexpr double kMinParallelWork = 2e6;

// The work of one call, shared by the threads.
struct MatmulPlan {
  const kernels::KernelSet* ks;
  int64_t m, k, n, kp, np;
  int64_t groups;                 // independent GEMMs (output batches, or 1 when b is not batched)
  int64_t rows_per_group;         // M, or M * batches when the batches of a share one b
  const BroadcastIndex* b_index;  // b's matrix for an output batch (used when not folded)
  bool fold;
  const Tensor* b;
  bool transpose_b;
  // [groups][rows_per_group][kp] and [groups][rows_per_group][np]; rows start 64-byte aligned
  // (kp, np are multiples of 32 floats) so that the kernels' vector loads never split cache lines.
  float* a_rows = nullptr;  // not made when the bf16 path packs A straight from its tiles
  float* c_rows;
  float* a_packed = nullptr;  // [groups][rows_per_group * kp] micro-panels, or nullptr (small M)
  // The bf16 path (kernels::bf16_path_applies): A packed as pairs of bfloat16 instead.
  bool bf16 = false;
  bool small_m_bf16 = false;    // decode rows on block-float weights, products in bfloat16
  uint32_t* a_pairs = nullptr;  // [groups][rows_per_group * kp / 2]
  const float* bias = nullptr;  // n values or nullptr
  Activation activation = Activation::NONE;
  Tensor* out;
  int64_t out_mt;  // output tile rows per batch matrix
  // Write only the valid rows of float32 / bfloat16 output tiles, leaving the padding rows as the
  // reused storage holds them (matmul_into): a decode step's output is 1 row in 32.
  bool rows_only = false;
};

// Bias and activation of `count` consecutive values of one output row, starting at `column`:
// plain loops over contiguous runs, which the compiler vectorises.
void epilogue_run(const MatmulPlan& p, const float* src, int64_t column, int64_t count, float* dst) {
  if (count <= 0) return;
  if (p.bias != nullptr) {
    for (int64_t i = 0; i < count; ++i) dst[i] = src[i] + p.bias[column + i];
  } else if (dst != src) {
    // A whole face row (the common case) as a fixed-size copy, which the compiler makes two
    // vector moves rather than a call (docs/performance.md, session 31).
    if (count == 16)
      std::memcpy(dst, src, 16 * sizeof(float));
    else
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
  }
  if (p.activation != Activation::NONE)
    for (int64_t i = 0; i < count; ++i) dst[i] = apply_activation(p.activation, dst[i]);
}

// One output row's 32 columns of tile column nt (cols valid) into a tile row in face order: columns
// 0-15 to the left face row, 16-31 to the right one (256 floats on); the invalid columns get 0.
void epilogue_tile_row(const MatmulPlan& p, const float* crow, int64_t nt, int64_t cols, float* face_row) {
  epilogue_run(p, crow, nt * 32, std::min<int64_t>(cols, 16), face_row);
  epilogue_run(p, crow + 16, nt * 32 + 16, cols - 16, face_row + 256);
  for (int64_t col = cols; col < 32; ++col) face_row[col < 16 ? col : col + 240] = 0.0f;
}

// Whether the output's rows are written one at a time (write_output_row): float32 and bfloat16.
// Block-float tiles are encoded whole (encode_storage), a tile of floats at a time.
bool rows_encode_alone(DataType dtype) { return dtype == DataType::FLOAT32 || dtype == DataType::BFLOAT16; }

// One row's 32 values of tile column nt (cols valid) into row r of its output tile, float32 or
// bfloat16, with bias and activation; the invalid columns get 0.
void write_output_row(const MatmulPlan& p, std::byte* tile, int64_t r, const float* crow, int64_t nt, int64_t cols) {
  if (p.out->dtype() == DataType::FLOAT32) {
    epilogue_tile_row(p, crow, nt, cols, reinterpret_cast<float*>(tile) + tile_element_index(r, 0));
    return;
  }
  alignas(64) float row[32];
  epilogue_run(p, crow, nt * 32, cols, row);
  for (int64_t col = cols; col < 32; ++col) row[col] = 0.0f;
  for (int64_t half = 0; half < 2; ++half) {
    uint16_t* d = reinterpret_cast<uint16_t*>(tile) + tile_element_index(r, 16 * half);
    for (int i = 0; i < 16; ++i) d[i] = float_to_bfloat16(row[16 * half + i]);
  }
}

// The output tile that row `row` of a group (its batches' rows one after another) falls in, at
// tile column nt.
std::byte* output_tile(const MatmulPlan& p, int64_t group, int64_t row, int64_t nt) {
  const int64_t batches_in_group = p.rows_per_group / p.m, out_batch = group * batches_in_group + row / p.m;
  const int64_t tile = (out_batch * p.out_mt + row % p.m / 32) * (p.np / 32) + nt;
  return p.out->data<std::byte>() + static_cast<size_t>(tile) * tile_bytes(p.out->dtype());
}

// fn(first, end, tiles) for each run [first, end) of the rows [r0, r1) of a group that fall in one
// output tile row (one batch's 32-row stretch); tiles is that tile row's tile column 0, and row
// `first` is row first % m % 32 of its tiles. The tile is found once per run, not per row.
template <class F>
void for_each_tile_row_run(const MatmulPlan& p, int64_t group, int64_t r0, int64_t r1, F&& fn) {
  for (int64_t first = r0; first < r1;) {
    const int64_t in_batch = first % p.m;
    const int64_t end = std::min({r1, first - in_batch + p.m, first - in_batch % 32 + 32});
    fn(first, end, output_tile(p, group, first, 0));
    first = end;
  }
}

// epilogue() for rows_only: each valid row's 32 values go straight to its two face rows, tile by
// tile (each batch's tile rows, each tile column, the tile's rows).
void epilogue_rows(const MatmulPlan& p, int64_t group, int64_t nt_begin, int64_t nt_end) {
  const float* c = p.c_rows + group * p.rows_per_group * p.np;
  const size_t bytes = tile_bytes(p.out->dtype());
  for_each_tile_row_run(p, group, 0, p.rows_per_group, [&](int64_t first, int64_t end, std::byte* tiles) {
    for (int64_t nt = nt_begin; nt < nt_end; ++nt)
      for (int64_t row = first; row < end; ++row)
        write_output_row(p, tiles + nt * bytes, first % p.m % 32 + (row - first), c + row * p.np + nt * 32, nt,
                         std::min<int64_t>(32, p.n - nt * 32));
  });
}

// The blocked kernels' kernels::CRowsDone, for float32 and bfloat16 output: rows [row, row + rows)
// of one group at tile column nt, their values at c (row stride ldc), into the output.
void epilogue_panel(const MatmulPlan& p, int64_t group, const float* c, int64_t ldc, int64_t row, int rows,
                    int64_t nt) {
  const int64_t cols = std::min<int64_t>(32, p.n - nt * 32);
  const size_t bytes = tile_bytes(p.out->dtype());
  for_each_tile_row_run(p, group, row, row + rows, [&](int64_t first, int64_t end, std::byte* tiles) {
    for (int64_t r = first; r < end; ++r)
      write_output_row(p, tiles + nt * bytes, first % p.m % 32 + (r - first), c + (r - row) * ldc, nt, cols);
  });
}

// Zeros in the padding rows of each batch's last output tile row (rows m .. its end), at tile
// columns [nt_begin, nt_end): what epilogue_panel leaves, which writes only the valid rows.
void zero_padding_rows(const MatmulPlan& p, int64_t group, int64_t nt_begin, int64_t nt_end) {
  if (p.m % 32 == 0) return;
  const size_t value_bytes = p.out->dtype() == DataType::FLOAT32 ? sizeof(float) : sizeof(uint16_t);
  for (int64_t last = p.m - 1; last < p.rows_per_group; last += p.m)
    for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
      std::byte* tile = output_tile(p, group, last, nt);
      for (int64_t r = p.m % 32; r < 32; ++r)
        for (int64_t half = 0; half < 2; ++half)
          std::memset(tile + static_cast<size_t>(tile_element_index(r, 16 * half)) * value_bytes, 0, 16 * value_bytes);
    }
}

// Bias, activation and encoding of output tiles (mt over all output batches' tile rows) for the
// tile columns [nt_begin, nt_end) of one group. float32 tiles are written in place; other formats
// go through one tile of floats in face order.
void epilogue(const MatmulPlan& p, int64_t group, int64_t nt_begin, int64_t nt_end) {
  const DataType dtype = p.out->dtype();
  if (p.rows_only && rows_encode_alone(dtype)) {
    epilogue_rows(p, group, nt_begin, nt_end);
    return;
  }
  const int64_t out_nt = p.np / 32;
  const int64_t batches_in_group = p.rows_per_group / p.m;
  alignas(64) float scratch[32 * 32];
  for (int64_t bi = 0; bi < batches_in_group; ++bi) {
    const int64_t out_batch = group * batches_in_group + bi;
    const float* c = p.c_rows + (group * p.rows_per_group + bi * p.m) * p.np;
    for (int64_t mt = 0; mt < p.out_mt; ++mt)
      for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
        const int64_t tile_index = (out_batch * p.out_mt + mt) * out_nt + nt;
        std::byte* dst = p.out->data<std::byte>() + static_cast<size_t>(tile_index) * tile_bytes(dtype);
        float* faces = dtype == DataType::FLOAT32 ? reinterpret_cast<float*>(dst) : scratch;
        // Only the valid rows (often 1 of 32 in decode) are read and activated; padding rows are 0.
        const int64_t rows = std::min<int64_t>(32, p.m - mt * 32), cols = std::min<int64_t>(32, p.n - nt * 32);
        for (int64_t r = 0; r < rows; ++r)
          epilogue_tile_row(p, c + (mt * 32 + r) * p.np + nt * 32, nt, cols, faces + tile_element_index(r, 0));
        for (int64_t r = rows; r < 32; ++r) {
          std::memset(faces + tile_element_index(r, 0), 0, 16 * sizeof(float));
          std::memset(faces + tile_element_index(r, 16), 0, 16 * sizeof(float));
        }
        if (dtype != DataType::FLOAT32) encode_storage(faces, dtype, kTileVolume, dst);
      }
  }
}

// Into `out`: reset to the result (storage kept when large enough), or, when `fresh`, allocated
// uninitialized (the epilogue writes every byte, so a new output needs no zero-fill).
void run_matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, const Tensor* bias,
                Activation activation, const MatmulOptions& options, const char* what, Tensor& out, bool fresh) {
  MESHNN_CHECK(a.shape().rank() >= 2 && b.shape().rank() >= 2, "{}: inputs need rank >= 2, got {} and {}", what,
               a.shape(), b.shape());
  MESHNN_CHECK(a.dtype() == DataType::FLOAT32 || a.dtype() == DataType::BFLOAT16,
               "{}: activations must be float32 or bfloat16, got {}", what, to_string(a.dtype()));
  MESHNN_CHECK(a.layout() == Layout::TILE && b.layout() == Layout::TILE,
               "{}: inputs must be TILE layout, got {} and {}", what, to_string(a.layout()), to_string(b.layout()));
  MESHNN_CHECK(!is_integer(b.dtype()), "{}: weights must be float32, bfloat16, bfloat8_b or bfloat4_b, got {}", what,
               to_string(b.dtype()));
  const DataType out_dtype = options.output_dtype.value_or(a.dtype());
  MESHNN_CHECK(!is_integer(out_dtype), "{}: output dtype must be a float format, got {}", what, to_string(out_dtype));

  const int64_t m = transpose_a ? a.shape()[-1] : a.shape()[-2];
  const int64_t k = transpose_a ? a.shape()[-2] : a.shape()[-1];
  const int64_t kb = transpose_b ? b.shape()[-1] : b.shape()[-2];
  const int64_t n = transpose_b ? b.shape()[-2] : b.shape()[-1];
  const bool b_window = options.b_row_begin.has_value();
  const int64_t b_row_begin = options.b_row_begin.value_or(0);
  if (!b_window) {
    MESHNN_CHECK(k == kb, "{}: inner dims differ: a {} (transpose_a={}) has K={}, b {} (transpose_b={}) has K={}", what,
                 a.shape(), transpose_a, k, b.shape(), transpose_b, kb);
  } else {
    MESHNN_CHECK(!transpose_b && b.volume() == b.shape()[-2] * b.shape()[-1] && b_row_begin % 32 == 0 &&
                     b_row_begin >= 0 && b_row_begin + k <= kb,
                 "{}: rows [{}, {}) of b {} (transpose_b={}): b must be one matrix, not transposed, and the window "
                 "start a multiple of 32 inside b",
                 what, b_row_begin, b_row_begin + k, b.shape(), transpose_b);
  }

  const std::span<const int64_t> a_batch = batch_dims(a.shape()), b_batch = batch_dims(b.shape());
  const ops_detail::Dims out_batch = ops_detail::broadcast_dims(a_batch, b_batch, what);
  const int64_t batches = ops_detail::volume(out_batch.span());
  trace::Scope scope("op", what);
  if (scope.active())
    scope.describe(fmt::format(R"("a":"{} {}","b":"{} {}","m":{},"k":{},"n":{},"path":"{}")", a.shape(),
                               to_string(a.dtype()), b.shape(), to_string(b.dtype()), m, k, n,
                               matmul_kernel_path(a.dtype(), b.dtype(), m, transpose_b, options)),
                   {.flops = 2.0 * static_cast<double>(batches * m) * static_cast<double>(k * n),
                    .bytes = static_cast<double>(a.size_bytes() + b.size_bytes()) +
                             static_cast<double>(batches * m * n) * (out_dtype == DataType::FLOAT32 ? 4 : 2)});

  MatmulPlan p;
  p.ks = &kernel_set_for(options);
  p.m = m;
  p.k = k;
  p.n = n;
  p.kp = round_up_to_tile(k);
  p.np = round_up_to_tile(n);
  p.b = &b;
  p.transpose_b = transpose_b;
  p.activation = activation;
  p.out_mt = round_up_to_tile(m) / 32;

  ops_detail::Dims out_dims = out_batch;
  out_dims.push_back(m);
  out_dims.push_back(n);
  MESHNN_CHECK(&out != &a && &out != &b && &out != bias, "{}: the output must be a tensor of its own", what);
  // The epilogue writes every tile of the output whole, padding included (zeros): no zero-fill
  // here, which would be a serial pass over the output before the threads start.
  if (fresh)
    out = Tensor::uninitialized(Shape(out_dims.span()), out_dtype, Layout::TILE);
  else
    out.reset(Shape(out_dims.span()), out_dtype, Layout::TILE);
  p.out = &out;
  p.rows_only = !fresh;

  std::vector<float> bias_values;
  if (bias != nullptr) {
    MESHNN_CHECK(bias->volume() == n && bias->shape()[-1] == n,
                 "{}: bias must hold N={} values in its last dim, got {}", what, n, bias->shape());
    // A float32 ROW_MAJOR bias is read where it is (a decode step then allocates nothing for it).
    if (bias->dtype() == DataType::FLOAT32 && bias->layout() == Layout::ROW_MAJOR) {
      p.bias = bias->data<float>();
    } else {
      bias_values = bias->to_float();
      p.bias = bias_values.data();
    }
  }
  if (m == 0 || n == 0 || batches == 0) {
    std::memset(out.data<std::byte>(), 0, out.size_bytes());
    return;
  }

  // When b has a single matrix, all batches of a are one GEMM with M * batches rows: better
  // blocking for decode (e.g. 32 users x 1 row) and B decoded once.
  const bool fold = ops_detail::volume(b_batch) == 1;
  p.groups = fold ? 1 : batches;
  p.rows_per_group = fold ? m * batches : m;
  const BroadcastIndex a_index(a_batch, out_batch.span()), b_index(b_batch, out_batch.span());
  p.b_index = &b_index;
  p.fold = fold;

  // The calling thread's scratch (core/scratch.hpp): a prefill matmul needs tens of MB, and fresh
  // pages every call cost about 5% in page faults (docs/design-measurements.md).
  ScratchScope scratch;
  ThreadPool* pool = options.pool;
  if (pool == nullptr) pool = default_worker_pool();
  const int threads = pool ? pool->num_threads() : 1;
  // Waking the workers costs more than a small phase gains: below ~2 MFLOP per thread (or 256K A
  // values for the preparation phases) a phase runs on the calling thread alone
  // (docs/design-measurements.md §12).
  const double flops = 2.0 * static_cast<double>(batches) * m * k * n;
  auto run = [&](int64_t count, double work_size, FunctionRef<void(int64_t, int64_t, int)> fn) {
    if (pool != nullptr && threads > 1 && count > 1 && work_size >= threads * kMinParallelWork)
      pool->parallel_for(count, fn);
    else
      fn(0, count, 0);
  };
  const double a_values = static_cast<double>(p.groups) * p.rows_per_group * p.kp;
  p.bf16 = kernels::bf16_path_applies(*p.ks, a.dtype(), b.dtype(), p.rows_per_group, transpose_b);
  p.small_m_bf16 = kernels::small_m_bf16_applies(*p.ks, a.dtype(), b.dtype(), p.rows_per_group, transpose_b);
  p.c_rows = scratch.acquire_as<float>(static_cast<size_t>(p.groups * p.rows_per_group * p.np));

  // The bf16 path packs A's pairs straight from its tiles (a 32-bit copy per pair); A's rows in
  // float32 would be a conversion and a pass over memory more, on every rank of a tensor-parallel
  // prefill alike.
  if (p.bf16 && !transpose_a) {
    const Shape a_padded = a.padded_shape();
    const int64_t a_tile_cols = a_padded[-1] / 32, a_matrix_tiles = a_padded[-2] / 32 * a_tile_cols;
    const int64_t total_rows = p.groups * p.rows_per_group;
    // Scratch is handed out in slots by order of request (core/scratch.hpp): A's storage takes the
    // second slot on every path, so that a decode-sized call after a prefill-sized one finds
    // every slot large enough and allocates nothing.
    p.a_pairs = scratch.acquire_as<uint32_t>(static_cast<size_t>(total_rows * p.kp / 2));
    const uint16_t** rows = scratch.acquire_as<const uint16_t*>(static_cast<size_t>(total_rows));
    for (int64_t row = 0; row < total_rows; ++row) {
      const int64_t ob = row / m, r = row % m;  // output batch and row (fold or not: batches of m rows)
      rows[row] = a.data<uint16_t>() + (a_index(ob) * a_matrix_tiles + r / 32 * a_tile_cols) * kTileVolume +
                  tile_element_index(r % 32, 0);
    }
    const int64_t pieces = kernels::gemm_pack_pieces(p.rows_per_group, p.kp, true);
    run(p.groups * pieces, a_values * 8, [&](int64_t begin, int64_t end, int) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t g = item / pieces;
        kernels::gemm_pack_a_piece_bf16_tiles(*p.ks, p.rows_per_group, rows + g * p.rows_per_group, k, p.kp,
                                              item % pieces, p.a_pairs + g * p.rows_per_group * p.kp / 2);
      }
    });
  } else {
    // Activations -> float rows, one item per (output batch, stored tile row).
    p.a_rows = scratch.acquire_as<float>(static_cast<size_t>(p.groups * p.rows_per_group * p.kp));
    const int64_t a_tile_rows = a.padded_shape()[-2] / 32;
    run(batches * a_tile_rows, a_values * 8, [&](int64_t begin, int64_t end, int) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t ob = item / a_tile_rows;
        load_a_tile_row(*p.ks, a, a_index(ob), item % a_tile_rows, transpose_a, m, k, p.a_rows + ob * m * p.kp, p.kp);
      }
    });
  }

  // A packed into micro-panels once, shared by the threads that split N.
  if (p.bf16 && transpose_a) {
    p.a_pairs = scratch.acquire_as<uint32_t>(static_cast<size_t>(p.groups * p.rows_per_group * p.kp / 2));
    const int64_t pieces = kernels::gemm_pack_pieces(p.rows_per_group, p.kp, true);
    run(p.groups * pieces, a_values * 8, [&](int64_t begin, int64_t end, int) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t g = item / pieces;
        kernels::gemm_pack_a_piece_bf16(*p.ks, p.rows_per_group, p.a_rows + g * p.rows_per_group * p.kp, p.kp, p.kp,
                                        item % pieces, p.a_pairs + g * p.rows_per_group * p.kp / 2);
      }
    });
  } else if (!p.bf16 && !p.small_m_bf16 && kernels::gemm_packs_a(*p.ks, p.rows_per_group, transpose_b)) {
    p.a_packed = scratch.acquire_as<float>(static_cast<size_t>(p.groups * p.rows_per_group * p.kp));
    const int64_t pieces = kernels::gemm_pack_pieces(p.rows_per_group, p.kp, false);
    run(p.groups * pieces, a_values * 8, [&](int64_t begin, int64_t end, int) {
      for (int64_t item = begin; item < end; ++item) {
        const int64_t g = item / pieces;
        kernels::gemm_pack_a_piece(*p.ks, p.rows_per_group, p.a_rows + g * p.rows_per_group * p.kp, p.kp, p.kp,
                                   item % pieces, p.a_packed + g * p.rows_per_group * p.kp);
      }
    });
  }

  const int64_t nt_total = p.np / 32;
  // Items = (group, chunk of tile columns); enough chunks to give every thread work.
  const int64_t chunks = std::min<int64_t>(nt_total, std::max<int64_t>(1, (threads + p.groups - 1) / p.groups));
  const int64_t items = p.groups * chunks;

  const size_t b_matrix_bytes =
      static_cast<size_t>(b.padded_shape()[-2] / 32 * (b.padded_shape()[-1] / 32)) * tile_bytes(b.dtype());
  auto work = [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t g = item / chunks, chunk = item % chunks;
      const int64_t nt_begin = nt_total * chunk / chunks, nt_end = nt_total * (chunk + 1) / chunks;
      // A row window of b starts whole tile rows in and spans the window's tile rows (K padded
      // to a tile: a's zero columns meet the next rows of b there).
      const int64_t b_tile_cols = b.padded_shape()[-1] / 32;
      const kernels::TileMatrix bm{b.data<std::byte>() + (p.fold ? 0 : (*p.b_index)(g)) * b_matrix_bytes +
                                       static_cast<size_t>(b_row_begin / 32 * b_tile_cols) * tile_bytes(b.dtype()),
                                   b.dtype(), b_window ? p.kp / 32 : b.padded_shape()[-2] / 32, b_tile_cols};
      float* c = p.c_rows + g * p.rows_per_group * p.np;
      const float* a_rows = p.a_rows ? p.a_rows + g * p.rows_per_group * p.kp : nullptr;
      const bool blocked = p.bf16 || p.a_packed != nullptr;
      // On the blocked paths, float32 and bfloat16 output is written a micro-kernel call's rows at
      // a time, as soon as they are final (kernels::CRowsDone): the stores drain behind the next
      // products instead of making a pass of their own after them, +0.5-2% against an epilogue
      // per C block (docs/performance.md, session 44).
      const bool rows_as_final = blocked && rows_encode_alone(p.out->dtype());
      auto write_rows = [&](const float* rows_c, int64_t ldc, int64_t row, int rows, int64_t nt) {
        epilogue_panel(p, g, rows_c, ldc, row, rows, nt);
      };
      const kernels::CRowsDone write_rows_ref(write_rows);
      const kernels::CRowsDone* rows_done = rows_as_final ? &write_rows_ref : nullptr;
      // Otherwise (block-float output, a whole tile at a time), with one block of rows, each C
      // block (the kernels' tile columns per block) goes through the epilogue while it is still in
      // L2, not after all of this item's columns (+1-4% on 128-row bf16 products,
      // docs/performance.md, session 25). With more row blocks the kernels' own loop order (A's
      // blocks outermost) is kept, so that A is not read from memory once per C block; the small-M
      // paths' C is a few rows, nothing to gain.
      const bool per_c_block = blocked && !rows_as_final && kernels::gemm_row_blocks(p.rows_per_group) == 1;
      const int64_t step = per_c_block ? kernels::gemm_c_block_tiles() : nt_end;
      for (int64_t s = nt_begin; s < nt_end; s += step) {
        const int64_t e = std::min(nt_end, s + step);
        if (p.small_m_bf16)
          p.ks->small_m_bf16(static_cast<int>(p.rows_per_group), a_rows, p.kp, bm, s, e, c, p.np);
        else if (p.bf16)
          kernels::gemm_tile_b_bf16(*p.ks, p.rows_per_group, a_rows, p.kp,
                                    p.a_pairs + g * p.rows_per_group * p.kp / 2, bm, s, e, c, p.np, rows_done);
        else
          kernels::gemm_tile_b(*p.ks, p.rows_per_group, a_rows, p.kp,
                               p.a_packed ? p.a_packed + g * p.rows_per_group * p.kp : nullptr, bm, transpose_b, s, e,
                               c, p.np, rows_done);
        if (!rows_as_final) epilogue(p, g, s, e);
      }
      if (rows_as_final && !p.rows_only) zero_padding_rows(p, g, nt_begin, nt_end);
    }
  };
  run(items, flops, work);
}

}  // namespace

const char* matmul_kernel_path(DataType activation, DataType weight, int64_t rows, bool transpose_b,
                               const MatmulOptions& options) {
  const kernels::KernelSet& ks = kernel_set_for(options);
  if (kernels::small_m_bf16_applies(ks, activation, weight, rows, transpose_b)) return ks.small_m_bf16_path;
  if (kernels::bf16_path_applies(ks, activation, weight, rows, transpose_b)) return ks.bf16_path;
  // The avx512-bf16 and amx-bf16 sets' float32 products are avx512's.
  return to_string(std::min(ks.isa, kernels::Isa::AVX512));
}

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b, const MatmulOptions& options) {
  Tensor out;
  run_matmul(a, b, transpose_a, transpose_b, nullptr, Activation::NONE, options, "matmul", out, true);
  return out;
}

void matmul_into(const Tensor& a, const Tensor& b, Tensor& output, bool transpose_a, bool transpose_b,
                 const MatmulOptions& options) {
  run_matmul(a, b, transpose_a, transpose_b, nullptr, Activation::NONE, options, "matmul", output, false);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias, Activation activation,
              const MatmulOptions& options) {
  Tensor out;
  run_matmul(x, w, false, false, bias, activation, options, "linear", out, true);
  return out;
}

void linear_into(const Tensor& x, const Tensor& w, const Tensor* bias, Activation activation, Tensor& output,
                 const MatmulOptions& options) {
  run_matmul(x, w, false, false, bias, activation, options, "linear", output, false);
}

}  // namespace meshnn
