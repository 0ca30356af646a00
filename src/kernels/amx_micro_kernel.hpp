// The AMX-BF16 micro-kernel, written once against a tile interface that two classes provide: the
// hardware's tile instructions (matmul_amx.cpp, inline assembly: no -mamx flags needed) and a
// portable emulation of them (amx_emulated.cpp), so that the kernel's logic (the tile shapes, the
// strides, which tile adds into which) is tested on every machine and its bits checked against the
// hardware's where there is one.
//
// The kernel's contract is the bf16 micro-kernel's (matmul_kernels.hpp), with A's micro-panel in
// rows ([mr][kc/2] pairs, KernelSet::bf16_a_rows): C[mr][32] = (accumulate ? C : 0) + A * B, for
// 1 <= mr <= 32 and kc a multiple of 32. Eight tiles:
//   C00 C01   rows 0-15 of C, columns 0-15 and 16-31     (16 floats per row: 64 bytes)
//   C10 C11   rows 16-31                                 (only when mr > 16)
//   A0  A1    rows 0-15 and 16-31 of A, 16 pairs = 32 values of K per step
//   B0  B1    16 rows of pairs (32 values of K) by columns 0-15 and 16-31 of the B panel
// and per step of 32 values of K four products, each a 16x32 by 32x16 tdpbf16ps. C starts in its
// tiles (loaded, or zeroed) and each product adds into it, as the instruction accumulates.
#pragma once

#include <algorithm>
#include <cstdint>

namespace meshnn::kernels::amx {

enum Tile : int { C00 = 0, C01 = 1, C10 = 2, C11 = 3, A0 = 4, A1 = 5, B0 = 6, B1 = 7 };

// The tile shapes for mr rows of C (r0 = rows of the first row of tiles, r1 of the second).
struct TileShape {
  int r0, r1;
  bool operator==(const TileShape& o) const { return r0 == o.r0 && r1 == o.r1; }
};

inline TileShape tile_shape(int mr) { return {std::min(mr, 16), std::max(mr - 16, 0)}; }

// Tiles provides, all per calling thread:
//   configure(TileShape)                  the shapes above (C and A tiles r0/r1 rows, B 16 rows; 64 bytes a row)
//   load<T>(const void*, stride_bytes)    tile T's rows from memory
//   zero<T>()
//   dot<C, A, B>()                        tdpbf16ps: C += A * B
//   store<T>(void*, stride_bytes)
template <class Tiles>
void micro_kernel(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool accumulate) {
  const TileShape shape = tile_shape(mr);
  Tiles::configure(shape);
  const bool two_rows = shape.r1 > 0;
  const int64_t c_stride = ldc * static_cast<int64_t>(sizeof(float));
  const int64_t a_stride = kc / 2 * static_cast<int64_t>(sizeof(uint32_t));  // one row of A's pairs
  constexpr int64_t kBStride = 32 * sizeof(uint32_t);                          // one row of the B panel
  float* c1 = c + 16 * ldc;
  if (accumulate) {
    Tiles::template load<C00>(c, c_stride);
    Tiles::template load<C01>(c + 16, c_stride);
    if (two_rows) {
      Tiles::template load<C10>(c1, c_stride);
      Tiles::template load<C11>(c1 + 16, c_stride);
    }
  } else {
    Tiles::template zero<C00>();
    Tiles::template zero<C01>();
    if (two_rows) {
      Tiles::template zero<C10>();
      Tiles::template zero<C11>();
    }
  }
  const uint32_t* a1 = a + 16 * (kc / 2);
  for (int64_t kk = 0; kk < kc / 2; kk += 16) {
    Tiles::template load<B0>(b + kk * 32, kBStride);
    Tiles::template load<B1>(b + kk * 32 + 16, kBStride);
    Tiles::template load<A0>(a + kk, a_stride);
    Tiles::template dot<C00, A0, B0>();
    Tiles::template dot<C01, A0, B1>();
    if (two_rows) {
      Tiles::template load<A1>(a1 + kk, a_stride);
      Tiles::template dot<C10, A1, B0>();
      Tiles::template dot<C11, A1, B1>();
    }
  }
  Tiles::template store<C00>(c, c_stride);
  Tiles::template store<C01>(c + 16, c_stride);
  if (two_rows) {
    Tiles::template store<C10>(c1, c_stride);
    Tiles::template store<C11>(c1 + 16, c_stride);
  }
}

}  // namespace meshnn::kernels::amx
