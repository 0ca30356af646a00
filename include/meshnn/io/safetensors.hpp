// Reading safetensors files (Hugging Face's weight format) without copying them.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON mapping each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte
// after the header; an optional "__metadata__" object of strings), then the raw little-endian data.
// The file is memory-mapped, so a tensor's bytes are a view into the page cache: a converter that
// streams tensor by tensor holds about one tensor in memory, not the model.
//
// Everything in the header is checked when the file is opened, before any data is used: a header
// length beyond the file, JSON that does not parse or is not the expected shape, an unknown dtype,
// offsets outside the data or overlapping another tensor's, and a byte count that disagrees with
// dtype x shape each throw meshnn::Error naming the file (and the tensor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace meshnn::io {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // safetensors' name: F32, F16, BF16, I64, ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
  size_t element_size = 0;
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) = delete;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In data order (ascending offsets).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return size_; }

  // The tensor's bytes, a view into the mapping (valid while this object lives).
  std::span<const std::byte> bytes(const SafetensorsTensor& t) const;
  // Tells the kernel the pages of bytes [begin, end) of the tensor (default: all of it) are no
  // longer needed, so they stop counting towards this process's resident memory (they stay in the
  // page cache; reading them again maps them back).
  void release(const SafetensorsTensor& t, uint64_t begin = 0, uint64_t end = UINT64_MAX) const;

 private:
  std::string path_;
  const std::byte* map_ = nullptr;
  uint64_t size_ = 0, data_begin_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype name; 0 for a name safetensors does not define.
size_t safetensors_element_size(const std::string& dtype);

}  // namespace meshnn::io
