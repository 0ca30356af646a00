// A tensor's storage as a collective sees it (internal to src/ccl): its elements in storage order
// (TILE padding included, block floats in face order), how the parts of one dim sit in it, and
// the conversion to and from the compute type a schedule reduces in.
#pragma once

#include <optional>

#include "meshnn/ccl/reduce.hpp"
#include "meshnn/tensor/storage_runs.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn::ccl::detail {

size_t storage_bytes_of(int64_t elements, DataType dtype);
// A tensor holding a copy of stored bytes (one member's shard as the schedules move it).
Tensor tensor_from_bytes(const Shape& shape, DataType dtype, Layout layout, const std::byte* bytes);
// The n equal parts of t along d, each stored as a tensor of the part's shape would be, back to
// back in `parts` (t's storage bytes in all). Whole tiles are copied when the cuts are
// tile-aligned; otherwise the parts are sliced out (block floats requantised).
void split_parts(const Tensor& t, int d, int n, std::byte* parts);
// The inverse: n parts of shape `part`, back to back in `parts`, concatenated along d into t (whose
// shape is part's with dim d n times larger), overwriting its storage.
void join_parts(const std::byte* parts, const Shape& part, int d, int n, Tensor& t);
ElementType compute_type(DataType dtype);
// Storage already in the compute type (no conversion pass).
bool native(DataType dtype);
int64_t storage_elements(const Tensor& t);
// Storage -> compute values (same element order); compute values -> storage, quantising once.
void storage_to_compute(const Tensor& t, void* out);
void compute_to_storage(const void* values, Tensor& t);

}  // namespace meshnn::ccl::detail
