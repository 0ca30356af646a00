// The element arithmetic of reducing collectives: one fixed-order combine per hop.
//
// Values are reduced in a compute type: float32 for every floating dtype (bfloat16 and block
// floats are widened first, and quantised once at the very end), int32 / uint32 for the integer
// dtypes (wrap-around sums). Partial results travel on the wire in the compute type; for float32
// the caller may ship bfloat16 partials instead (half the bytes, but each hop rounds the partial
// to 8 mantissa bits: less accurate, off by default).
//
// Order: every combine is "a (+) b" with `a` the partial accumulated so far, so an element's result
// depends only on the schedule's fixed chain of members, never on message arrival order.
// MEAN reduces as SUM and divides by the group size once, in finish().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "meshnn/tensor/placement.hpp"

namespace meshnn::ccl {

enum class ElementType { F32, I32, U32 };

// How a combine writes its result. Streaming uses non-temporal stores (on AVX2/AVX-512 machines;
// elsewhere, and for bfloat16 wires, it falls back to Cached): for results another rank reads
// next and this one does not. See src/ccl/vector_combine.hpp.
enum class ResultStores { CACHED, STREAMING };

struct Reduction {
  ReduceOp op = ReduceOp::SUM;
  ElementType type = ElementType::F32;
  bool bf16_wire = false;  // F32 only: partials shipped as bfloat16
  int group_size = 1;      // MEAN's divisor

  size_t compute_bytes(int64_t count) const { return static_cast<size_t>(count) * 4; }
  size_t wire_bytes(int64_t count) const { return static_cast<size_t>(count) * (bf16_wire ? 2 : 4); }
  bool wire_is_compute() const { return !bf16_wire; }

  // wire = own (first hop of a chain).
  void to_wire(const void* own, void* wire, int64_t count) const;
  // wire = wire (+) own, in place (an intermediate hop).
  void combine_into_wire(void* wire, const void* own, int64_t count) const;
  // out = wire (+) own (compute type; the hop that reaches the owner). out may be `own` itself
  // (each element is read before it is written) but must not overlap `wire`.
  void combine_wire_to(const void* wire, const void* own, void* out, int64_t count,
                       ResultStores stores = ResultStores::CACHED) const;
  // out = out (+) wire, in place (compute type).
  void accumulate_wire(void* out, const void* wire, int64_t count, ResultStores stores = ResultStores::CACHED) const;
  // out = sources[0] (+) sources[1] (+) ... in that order (compute type; direct schedules). out may
  // alias no source.
  void combine_sources(std::span<const void* const> sources, void* out, int64_t count) const;
  // MEAN: out /= group_size (integers truncate toward zero). No-op for the other ops.
  void finish(void* out, int64_t count) const;
};

}  // namespace meshnn::ccl
