// Helpers shared by meshnn's tests.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/core/cpu_features.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn::testing {

// Seeded values every rank computes identically (no RNG state shared with anything else):
// a hash of (seed, index) mapped to [-1, 1) and, with `integers`, to small integers.
std::vector<float> seeded_values(int64_t count, uint64_t seed, bool integers = false);

// Normally distributed values (mean 0, standard deviation `scale`) from std::mt19937(seed): the
// single-process tests' random operands.
std::vector<float> normal_values(int64_t count, uint32_t seed, float scale = 1.0f);

// Caps the kernels' instruction set (core/cpu_features.hpp) for one scope, restoring the default.
struct ScopedIsaCap {
  explicit ScopedIsaCap(Isa isa) { set_isa_cap(isa); }
  ~ScopedIsaCap() { reset_isa_cap(); }
  ScopedIsaCap(const ScopedIsaCap&) = delete;
  ScopedIsaCap& operator=(const ScopedIsaCap&) = delete;
};

// A [rows, cols] row-major matrix transposed to [cols, rows].
std::vector<float> transpose(const std::vector<float>& v, int64_t rows, int64_t cols);

// A host tensor of seeded values (integers for INT32/UINT32; non-negative for UINT32).
Tensor seeded_tensor(const Shape& shape, DataType dtype, Layout layout, uint64_t seed);

// True on every rank iff `ok` is true on every rank of comm (MPI_COMM_WORLD by default): the way an
// MPI test combines a verdict, so that all ranks pass or fail together.
bool all_ranks_ok(bool ok, MPI_Comm comm = MPI_COMM_WORLD);

// Bitwise equality of two tensors' logical contents, plus the same dtype/layout/shape.
bool bitwise_equal(const Tensor& a, const Tensor& b);

// Runs fn, expects meshnn::Error containing `needle` on this rank; returns the message ("" if none).
template <class Fn>
std::string error_message_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The same string on every rank? (compares a hash across comm)
bool same_on_all_ranks(const std::string& s, MPI_Comm comm = MPI_COMM_WORLD);

int world_rank();
int world_size();

// Every rows x cols mesh of n devices: 1xn, ..., nx1.
std::vector<MeshShape> all_mesh_shapes(int n);

// A mesh tensor whose logical value is `host` (float32, TILE) under `placements`, Partial axes
// included: along Partial axes the first member holds the shard, and every member adds c_j times
// `noise(axis)`'s shard, the c_j summing to zero over the axis. With integer-valued host and noise
// every sum is exact, so a reduction gives `host` bit for bit.
// |got - x @ w| within the output dtype's rounding plus float32 accumulation, element by element,
// with x @ w and the bound in float64 from the operands' stored values (w 2-D, broadcast over x's
// batch): 2 u |x||w| + K 2^-24 |x||w| + 1e-6 per element, u the unit roundoff of out_dtype
// (2^-24 float32, 2^-8 bfloat16, 2^-6 for block floats, which round to their block's exponent).
bool matmul_close_to_float64(const Tensor& x, const Tensor& w, const Tensor& got, DataType out_dtype);

MeshTensor with_logical_value(const Tensor& host, const Placements& placements, const MeshDevicePtr& mesh,
                              const Tensor& noise_axis0, const Tensor& noise_axis1);

}  // namespace meshnn::testing
