// Internal to src/kernels: helpers for the per-ISA files (*_avx2.cpp, *_avx512.cpp).
//
// Everything here sits in an anonymous namespace on purpose: each ISA file is compiled with its
// own instruction flags, and an ordinary inline function would get one out-of-line copy shared by
// all of them (and possibly by portable code), compiled with whichever flags the linker kept.
#pragma once

#include <cstddef>
#include <cstdint>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {
namespace {

// TileMatrix::tile() without calling the header's inline member from ISA-specific code.
inline const std::byte* tile_at(const TileMatrix& m, int64_t tr, int64_t tc, size_t bytes) {
  return m.data + static_cast<size_t>(tr * m.tile_cols + tc) * bytes;
}

}  // namespace
}  // namespace meshnn::kernels
