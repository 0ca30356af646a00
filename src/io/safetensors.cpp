#include "meshnn/io/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "meshnn/core/error.hpp"

namespace meshnn::io {

// The data is used in place, so the host must read little-endian as the format stores it.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

// safetensors' own limit on the header, so a hostile length cannot make the parser allocate much.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

using nlohmann::json;

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Non-negative JSON integer, or an error naming what it is.
uint64_t unsigned_value(const json& v, const std::string& file, const std::string& tensor, const char* field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  throw Error(fmt::format("safetensors '{}': tensor '{}' has a {} entry that is not a non-negative integer ({})", file,
                          tensor, field, v.dump()));
}

SafetensorsTensor parse_tensor(const std::string& name, const json& entry, uint64_t data_size, const std::string& file) {
  MESHNN_CHECK(entry.is_object(), "safetensors '{}': entry '{}' of the header is not an object", file, name);
  for (const char* key : {"dtype", "shape", "data_offsets"})
    MESHNN_CHECK(entry.contains(key), "safetensors '{}': tensor '{}' has no '{}'", file, name, key);
  const json& dtype = entry.at("dtype");
  const json& shape = entry.at("shape");
  const json& offsets = entry.at("data_offsets");
  MESHNN_CHECK(dtype.is_string(), "safetensors '{}': tensor '{}' has a dtype that is not a string", file, name);
  MESHNN_CHECK(shape.is_array(), "safetensors '{}': tensor '{}' has a shape that is not a list", file, name);
  MESHNN_CHECK(offsets.is_array() && offsets.size() == 2,
               "safetensors '{}': tensor '{}' needs data_offsets [begin, end], got {}", file, name, offsets.dump());
  SafetensorsTensor t;
  t.name = name;
  t.dtype = dtype.get<std::string>();
  t.element_size = safetensors_element_size(t.dtype);
  MESHNN_CHECK(t.element_size > 0, "safetensors '{}': tensor '{}' has unknown dtype '{}'", file, name, t.dtype);
  uint64_t bytes = t.element_size;
  for (const json& d : shape) {
    const uint64_t extent = unsigned_value(d, file, name, "shape");
    MESHNN_CHECK(extent <= (uint64_t{1} << 48) && (extent == 0 || bytes <= (uint64_t{1} << 62) / extent),
                 "safetensors '{}': tensor '{}' has an impossible shape {}", file, name, shape.dump());
    t.shape.push_back(static_cast<int64_t>(extent));
    bytes *= extent;
  }
  t.begin = unsigned_value(offsets[0], file, name, "data_offsets");
  t.end = unsigned_value(offsets[1], file, name, "data_offsets");
  MESHNN_CHECK(t.begin <= t.end && t.end <= data_size,
               "safetensors '{}': tensor '{}' has data_offsets [{}, {}] outside the data section of {} bytes", file,
               name, t.begin, t.end, data_size);
  MESHNN_CHECK(t.end - t.begin == bytes,
               "safetensors '{}': tensor '{}' is {} of shape [{}] = {} bytes, but its data_offsets span {} bytes", file,
               name, t.dtype, fmt::join(t.shape, ", "), bytes, t.end - t.begin);
  return t;
}

}  // namespace

size_t safetensors_element_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

int64_t SafetensorsTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  MESHNN_CHECK(fd >= 0, "cannot open '{}': {}", path_, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("'{}' is not a regular file", path_));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw Error(fmt::format("safetensors '{}' is {} bytes, too short for the 8-byte header length", path_, size_));
  }
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  MESHNN_CHECK(map != MAP_FAILED, "cannot map '{}': {}", path_, std::strerror(errno));
  map_ = static_cast<const std::byte*>(map);
  // Converters read each tensor once, front to back.
  ::madvise(map, size_, MADV_SEQUENTIAL);
  try {
    const uint64_t header = read_le64(map_);
    MESHNN_CHECK(header <= size_ - 8,
                 "safetensors '{}': header length {} is beyond the file ({} bytes; truncated or not safetensors?)",
                 path_, header, size_);
    MESHNN_CHECK(header <= kMaxHeaderBytes, "safetensors '{}': header length {} is above safetensors' limit of {} bytes",
                 path_, header, kMaxHeaderBytes);
    data_begin_ = 8 + header;
    const auto* text = reinterpret_cast<const char*>(map_ + 8);
    json root;
    try {
      root = json::parse(text, text + header);
    } catch (const json::exception& e) {
      throw Error(fmt::format("safetensors '{}': the header is not valid JSON ({})", path_, e.what()));
    }
    MESHNN_CHECK(root.is_object(), "safetensors '{}': the header is JSON but not an object", path_);
    const uint64_t data_size = size_ - data_begin_;
    for (const auto& [name, entry] : root.items()) {
      if (name == "__metadata__") {
        MESHNN_CHECK(entry.is_object(), "safetensors '{}': __metadata__ is not an object", path_);
        for (const auto& [key, value] : entry.items()) {
          MESHNN_CHECK(value.is_string(), "safetensors '{}': __metadata__ '{}' is not a string", path_, key);
          metadata_[key] = value.get<std::string>();
        }
        continue;
      }
      tensors_.push_back(parse_tensor(name, entry, data_size, path_));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    for (size_t i = 1; i < tensors_.size(); ++i)
      MESHNN_CHECK(tensors_[i].begin >= tensors_[i - 1].end,
                   "safetensors '{}': tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section", path_,
                   tensors_[i - 1].name, tensors_[i - 1].begin, tensors_[i - 1].end, tensors_[i].name,
                   tensors_[i].begin, tensors_[i].end);
    for (size_t i = 0; i < tensors_.size(); ++i) index_[tensors_[i].name] = i;
  } catch (...) {
    ::munmap(const_cast<std::byte*>(map_), size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      size_(o.size_),
      data_begin_(o.data_begin_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const SafetensorsTensor& t) const {
  return {map_ + data_begin_ + t.begin, static_cast<size_t>(t.end - t.begin)};
}

void SafetensorsFile::release(const SafetensorsTensor& t, uint64_t from, uint64_t to) const {
  const uint64_t size = t.end - t.begin;
  from = std::min(from, size);
  to = std::min(to, size);
  if (from >= to) return;
  // Whole pages: the first may hold bytes before `from`, which just map back in if read again.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(map_ + data_begin_ + t.begin + from) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(map_ + data_begin_ + t.begin + to);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace meshnn::io
