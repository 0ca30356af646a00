// Element conversions between the floating-point storage types of weight files: safetensors'
// F32 / F16 / BF16 to meshnn's stored float32 / bfloat16. Public so that a converter outside io
// (the Hugging Face one, src/models/hf_convert.cpp) can change a tensor's storage type block by
// block as it streams it from a safetensors file into an Hdf5Writer; nothing here knows a model.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::io {

// The stored type a safetensors dtype keeps (F32, F16, BF16); throws meshnn::Error for others.
StoredType stored_type_of(const std::string& safetensors_dtype, const std::string& tensor);
size_t stored_size(StoredType t);

// Converts `count` little-endian elements of `from` at `src` into `to` at `dst` (exact widening,
// or round-to-nearest-even narrowing to bfloat16).
void convert_elements(StoredType from, const std::byte* src, StoredType to, std::byte* dst, size_t count);

}  // namespace meshnn::io
