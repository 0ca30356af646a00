// Element types and layouts, named as TT-NN names them (ttnn.bfloat8_b, ttnn.TILE_LAYOUT, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace meshnn {

enum class DataType { FLOAT32, BFLOAT16, BFLOAT8_B, BFLOAT4_B, INT32, UINT32 };
enum class Layout { ROW_MAJOR, TILE };

// "float32", "bfloat16", "bfloat8_b", "bfloat4_b", "int32", "uint32".
std::string_view to_string(DataType dtype);
std::string_view to_string(Layout layout);  // "ROW_MAJOR", "TILE"
// Parses the names above (layouts case-insensitively); throws meshnn::Error listing the choices.
DataType parse_data_type(std::string_view name);
Layout parse_layout(std::string_view name);

// Block floating point: shares one exponent per 16 values, exists only in TILE layout.
constexpr bool is_block_float(DataType d) { return d == DataType::BFLOAT8_B || d == DataType::BFLOAT4_B; }
constexpr bool is_integer(DataType d) { return d == DataType::INT32 || d == DataType::UINT32; }

// Bytes one element occupies in ROW_MAJOR storage and in non-block TILE storage (block formats:
// 0, use tile_bytes()).
constexpr size_t element_bytes(DataType d) {
  switch (d) {
    case DataType::BFLOAT16: return 2;
    case DataType::BFLOAT8_B:
    case DataType::BFLOAT4_B: return 0;
    default: return 4;
  }
}

// Bytes of one 32x32 tile in TT-NN's storage: 4096, 2048, 1088, 576, 4096, 4096.
constexpr size_t tile_bytes(DataType d) {
  switch (d) {
    case DataType::BFLOAT16: return 2048;
    case DataType::BFLOAT8_B: return 1088;
    case DataType::BFLOAT4_B: return 576;
    default: return 4096;
  }
}

}  // namespace meshnn
