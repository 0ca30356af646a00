#include "meshnn/core/types.hpp"

#include <array>
#include <cctype>
#include <utility>

#include "meshnn/core/error.hpp"

namespace meshnn {
namespace {

constexpr std::array<std::pair<DataType, std::string_view>, 6> kDataTypeNames{{
    {DataType::FLOAT32, "float32"},
    {DataType::BFLOAT16, "bfloat16"},
    {DataType::BFLOAT8_B, "bfloat8_b"},
    {DataType::BFLOAT4_B, "bfloat4_b"},
    {DataType::INT32, "int32"},
    {DataType::UINT32, "uint32"},
}};

constexpr std::array<std::pair<Layout, std::string_view>, 2> kLayoutNames{{
    {Layout::ROW_MAJOR, "ROW_MAJOR"},
    {Layout::TILE, "TILE"},
}};

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

template <class Names>
std::string list_choices(const Names& names) {
  std::string out;
  for (const auto& [value, name] : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace

std::string_view to_string(DataType dtype) {
  for (const auto& [value, name] : kDataTypeNames) {
    if (value == dtype) return name;
  }
  return "unknown";
}

std::string_view to_string(Layout layout) {
  for (const auto& [value, name] : kLayoutNames) {
    if (value == layout) return name;
  }
  return "unknown";
}

DataType parse_data_type(std::string_view name) {
  for (const auto& [value, known] : kDataTypeNames) {
    if (known == name) return value;
  }
  throw Error(fmt::format("unknown dtype '{}' (expected one of {})", name, list_choices(kDataTypeNames)));
}

Layout parse_layout(std::string_view name) {
  for (const auto& [value, known] : kLayoutNames) {
    if (equal_ignoring_case(name, known)) return value;
  }
  throw Error(fmt::format("unknown layout '{}' (expected one of {})", name, list_choices(kLayoutNames)));
}

}  // namespace meshnn
