// Helpers shared by meshnn's tests.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/tensor/tensor.hpp"

namespace meshnn::testing {

// Seeded values every rank computes identically (no RNG state shared with anything else):
// a hash of (seed, index) mapped to [-1, 1) and, with `integers`, to small integers.
std::vector<float> seeded_values(int64_t count, uint64_t seed, bool integers = false);

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

}  // namespace meshnn::testing
