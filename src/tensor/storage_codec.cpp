#include "meshnn/tensor/storage_codec.hpp"

#include <cstring>
#include <span>

#include "meshnn/core/error.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/block_float.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn {
namespace {

int64_t whole_tiles(int64_t count, DataType dtype) {
  MESHNN_CHECK(count % kTileVolume == 0, "{} storage comes in whole tiles of {} elements, got {}", to_string(dtype),
               kTileVolume, count);
  return count / kTileVolume;
}

}  // namespace

void decode_storage(const std::byte* storage, DataType dtype, int64_t count, float* values) {
  const auto n = static_cast<size_t>(count);
  switch (dtype) {
    case DataType::FLOAT32:
      std::memcpy(values, storage, n * sizeof(float));
      return;
    case DataType::BFLOAT16:
      bfloat16_to_float(std::span(reinterpret_cast<const uint16_t*>(storage), n), std::span(values, n));
      return;
    case DataType::BFLOAT8_B:
    case DataType::BFLOAT4_B:
      unpack_block_float_tiles(storage, values, whole_tiles(count, dtype), dtype);
      return;
    default:
      throw Error(fmt::format("decode_storage: {} is not a float dtype", to_string(dtype)));
  }
}

void encode_storage(const float* values, DataType dtype, int64_t count, std::byte* storage) {
  const auto n = static_cast<size_t>(count);
  switch (dtype) {
    case DataType::FLOAT32:
      std::memcpy(storage, values, n * sizeof(float));
      return;
    case DataType::BFLOAT16:
      float_to_bfloat16(std::span(values, n), std::span(reinterpret_cast<uint16_t*>(storage), n));
      return;
    case DataType::BFLOAT8_B:
    case DataType::BFLOAT4_B:
      pack_block_float_tiles(values, storage, whole_tiles(count, dtype), dtype);
      return;
    default:
      throw Error(fmt::format("encode_storage: {} is not a float dtype", to_string(dtype)));
  }
}

}  // namespace meshnn
