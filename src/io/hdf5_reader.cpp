#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "hdf5_handles.hpp"
#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/kernels/row_kernels.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/storage_codec.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::io {
namespace {

using detail::Handle;

Handle open_file(const std::string& file) {
  detail::silence_hdf5_errors();
  if (std::FILE* f = std::fopen(file.c_str(), "rb"); f == nullptr) {
    throw Error(fmt::format("cannot open '{}': {}", file, std::strerror(errno)));
  } else {
    std::fclose(f);
  }
  if (H5Fis_hdf5(file.c_str()) <= 0)
    throw Error(fmt::format("'{}' is not a readable HDF5 file (not HDF5, truncated or corrupt)", file));
  Handle h(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!h.valid()) throw Error(fmt::format("cannot open HDF5 file '{}' (truncated or corrupt?)", file));
  return h;
}

Handle open_dataset(const Handle& f, const std::string& file, const std::string& dataset) {
  if (dataset.empty() || dataset.find('/') != std::string::npos || H5Lexists(f.get(), dataset.c_str(), H5P_DEFAULT) <= 0)
    throw Error(fmt::format("dataset '{}' not found in '{}'", dataset, file));
  Handle d(H5Dopen2(f.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(fmt::format("cannot open dataset '{}' in '{}' (corrupt file?)", dataset, file));
  return d;
}

// A scalar string attribute of any kind a producer writes: variable-length (h5py's default for a
// str) or fixed-length (h5py's default for bytes, and meshnn's writer), ASCII or UTF-8. HDF5 does
// not convert between character sets, so the memory type copies the file type's character set and
// vlen-ness; the bytes come back as stored (UTF-8 stays UTF-8). "" when absent or not a string.
std::string string_attribute(hid_t object, const char* name) {
  if (H5Aexists(object, name) <= 0) return "";
  Handle a(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return "";
  Handle type(H5Aget_type(a.get()), H5Tclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Sget_simple_extent_npoints(space.get()) != 1) return "";
  const H5T_cset_t cset = H5Tget_cset(type.get());
  Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  if (cset < 0 || H5Tset_cset(mem.get(), cset) < 0) return "";
  if (H5Tis_variable_str(type.get()) > 0) {
    char* value = nullptr;
    if (H5Tset_size(mem.get(), H5T_VARIABLE) < 0 || H5Aread(a.get(), mem.get(), &value) < 0) return "";
    std::string out = value != nullptr ? std::string(value) : std::string();
    // HDF5 allocated the string; its own reclaim frees it with the matching allocator.
#if H5_VERSION_GE(1, 12, 0)
    H5Treclaim(mem.get(), space.get(), H5P_DEFAULT, &value);
#else
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &value);
#endif
    return out;
  }
  // One byte more than stored, so a null-padded string that fills its whole size keeps its last
  // character when HDF5 converts it to a null-terminated one (space padding is stripped too).
  const size_t size = H5Tget_size(type.get()) + 1;
  std::string out(size, '\0');
  H5Tset_size(mem.get(), size);
  H5Tset_strpad(mem.get(), H5T_STR_NULLTERM);
  if (H5Aread(a.get(), mem.get(), out.data()) < 0) return "";
  out.resize(std::strlen(out.c_str()));
  return out;
}

DatasetInfo describe(const Handle& d, const std::string& file, const std::string& dataset) {
  DatasetInfo info;
  Handle space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1 || rank > kMaxRank)
    throw Error(fmt::format("dataset '{}' in '{}' has rank {}; meshnn reads 1 to {} dims", dataset, file, rank, kMaxRank));
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  for (hsize_t x : dims) info.shape.push_back(static_cast<int64_t>(x));

  Handle type(H5Dget_type(d.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  if (cls == H5T_FLOAT && size == 4) info.type = StoredType::FLOAT32;
  else if (cls == H5T_FLOAT && size == 2) info.type = StoredType::FLOAT16;
  else if (cls == H5T_INTEGER && size == 2 && H5Tget_sign(type.get()) == H5T_SGN_NONE &&
           string_attribute(d.get(), "dtype") == "bfloat16")
    info.type = StoredType::BFLOAT16;
  else if (cls == H5T_INTEGER && size == 4) info.type = StoredType::INT32;
  else if (cls == H5T_INTEGER && size == 8) info.type = StoredType::INT64;
  else
    throw Error(fmt::format("dataset '{}' in '{}' has an unsupported element type (class {}, {} bytes); expected "
                            "float32, float16, bfloat16 (uint16 with attribute dtype=\"bfloat16\"), int32 or int64",
                            dataset, file, static_cast<int>(cls), size));
  return info;
}

// Reads the box [start, start + count) of the dataset as float32 values, row-major, into `out`
// (resized; its storage and that of `bits`, bfloat16 staging, are reused from call to call).
void read_box_into(const Handle& d, const DatasetInfo& info, const std::vector<int64_t>& start,
                   const std::vector<int64_t>& count, const std::string& file, const std::string& dataset,
                   std::vector<float>& out, std::vector<uint16_t>& bits) {
  int64_t volume = 1;
  for (int64_t c : count) volume *= c;
  out.resize(static_cast<size_t>(volume));
  if (volume == 0) return;
  std::vector<hsize_t> hstart(start.begin(), start.end()), hcount(count.begin(), count.end());
  Handle file_space(H5Dget_space(d.get()), H5Sclose);
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, hstart.data(), nullptr, hcount.data(), nullptr);
  Handle mem_space(H5Screate_simple(static_cast<int>(hcount.size()), hcount.data(), nullptr), H5Sclose);
  herr_t rc;
  if (info.type == StoredType::BFLOAT16) {
    bits.resize(out.size());
    rc = H5Dread(d.get(), H5T_NATIVE_UINT16, mem_space.get(), file_space.get(), H5P_DEFAULT, bits.data());
    bfloat16_to_float(bits, out);
  } else {
    // HDF5 converts float16 and integers to float32 itself.
    rc = H5Dread(d.get(), H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT, out.data());
  }
  if (rc < 0)
    throw Error(fmt::format("reading dataset '{}' from '{}' failed (file truncated or corrupt?)", dataset, file));
}

std::vector<float> read_box(const Handle& d, const DatasetInfo& info, const std::vector<int64_t>& start,
                            const std::vector<int64_t>& count, const std::string& file, const std::string& dataset) {
  std::vector<float> out;
  std::vector<uint16_t> bits;
  read_box_into(d, info, start, count, file, dataset, out, bits);
  return out;
}

void check_expected_shape(const DatasetInfo& info, const LoadOptions& o, const std::string& file,
                          const std::string& dataset) {
  if (o.expected_shape && *o.expected_shape != info.shape)
    throw Error(fmt::format("dataset '{}' in '{}' has shape [{}], expected [{}]", dataset, file, fmt::join(info.shape, ", "),
                            fmt::join(*o.expected_shape, ", ")));
}

void check_finite(const std::vector<float>& values, const std::string& file, const std::string& dataset) {
  // First whether any value is inf or NaN (exponent field all ones), in a loop without an exit that
  // the compiler vectorises (every weight of a model passes here); then, only if so, which.
  uint32_t any_special = 0;
  for (const float v : values) any_special |= static_cast<uint32_t>((std::bit_cast<uint32_t>(v) & 0x7F800000u) == 0x7F800000u);
  if (any_special == 0) return;
  for (const float v : values)
    if (!std::isfinite(v))
      throw Error(fmt::format("dataset '{}' in '{}' contains {} (values must be finite)", dataset, file,
                              std::isnan(v) ? "NaN" : "inf"));
}

// The part of one dim a shard covers: [begin, begin + valid) of the stored data, then padding up
// to `size` (the shard's extent along that dim).
struct Extent {
  int64_t begin = 0, valid = 0, size = 0;
};

std::vector<Extent> shard_extents(const Shape& global, const Placements& ps, const MeshDevice& mesh, const Shape& shard) {
  std::vector<Extent> extents;
  for (int d = 0; d < global.rank(); ++d) {
    const int64_t chunk = shard[d];
    const int64_t begin = std::min(global[d], chunk * shard_index(ps, mesh.shape(), mesh.coordinate(), d));
    extents.push_back({begin, std::min(global[d], begin + chunk) - begin, chunk});
  }
  return extents;
}

// Puts `valid` row-major values of box `count` into a zero-padded box of `sizes`.
std::vector<float> pad_box(const std::vector<float>& values, const std::vector<int64_t>& count,
                           const std::vector<int64_t>& sizes, float pad_value) {
  if (count == sizes) return values;
  int64_t volume = 1;
  for (int64_t s : sizes) volume *= s;
  std::vector<float> out(static_cast<size_t>(volume), pad_value);
  const size_t rank = sizes.size();
  std::vector<int64_t> index(rank, 0);
  const int64_t rows = values.size() / static_cast<size_t>(std::max<int64_t>(count.back(), 1));
  for (int64_t r = 0; r < rows && count.back() > 0; ++r) {
    int64_t rem = r, dst = 0, stride = 1;
    for (size_t d = rank - 1; d-- > 0;) {
      index[d] = rem % count[d];
      rem /= count[d];
    }
    for (size_t d = rank; d-- > 0;) {
      dst += (d == rank - 1 ? 0 : index[d]) * stride;
      stride *= sizes[d];
    }
    std::memcpy(&out[static_cast<size_t>(dst)], &values[static_cast<size_t>(r * count.back())],
                static_cast<size_t>(count.back()) * sizeof(float));
  }
  return out;
}

// Linear weight [N, K] stored, shard of [K, N] wanted. One block of 32 stored rows is one tile
// column of the shard: read it, then each of its tiles transposed into face order and encoded in
// place. The staging is 32 x K floats and three tiles, however large the weight, reused from tile
// column to tile column (docs/performance.md, session 33: the load's cost).
Tensor load_transposed_tiles(const Handle& d, const DatasetInfo& info, const Extent& k, const Extent& n,
                             const LoadOptions& o, const std::string& file, const std::string& dataset) {
  Tensor out = Tensor::uninitialized(Shape{k.size, n.size}, o.dtype, Layout::TILE);  // every tile written below
  const int64_t tile_cols = round_up_to_tile(n.size) / kTileWidth;
  const int64_t tile_rows = round_up_to_tile(k.size) / kTileHeight;
  const size_t bytes_per_tile = tile_bytes(o.dtype);
  std::vector<float> stored;
  std::vector<uint16_t> bits;
  // Per tile: the stored rows' 32 values into a tile in face order (row j = stored row j), the
  // register transpose the attention kernels use, and the result back into face order.
  const kernels::RowKernelSet& rk = kernels::row_kernel_set();
  alignas(64) float stored_faces[kTileVolume], transposed[kTileVolume], faces[kTileVolume];
  for (int64_t tc = 0; tc < tile_cols; ++tc) {
    // Stored rows n.begin + tc * 32 + j (j < rows) are the tile column's columns j; the rest, zeros.
    const int64_t rows = std::clamp<int64_t>(n.valid - tc * kTileWidth, 0, kTileWidth);
    if (rows > 0) {
      read_box_into(d, info, {n.begin + tc * kTileWidth, k.begin}, {rows, k.valid}, file, dataset, stored, bits);
      if (o.reject_non_finite) check_finite(stored, file, dataset);
    }
    for (int64_t tr = 0; tr < tile_rows; ++tr) {
      const int64_t k0 = tr * kTileHeight, k_rows = std::clamp<int64_t>(k.valid - k0, 0, kTileHeight);
      if (rows < kTileWidth || k_rows < kTileHeight) std::fill(std::begin(stored_faces), std::end(stored_faces), 0.0f);
      for (int64_t j = 0; j < rows; ++j) {
        const float* src = stored.data() + j * k.valid + k0;
        const int64_t left = std::min<int64_t>(k_rows, 16);
        std::copy(src, src + left, stored_faces + tile_element_index(j, 0));
        if (k_rows > 16) std::copy(src + 16, src + k_rows, stored_faces + tile_element_index(j, 16));
      }
      rk.transpose_tile(stored_faces, transposed);  // transposed[r * 32 + j]: row r of K, column j
      tilize(transposed, faces, 1, kTileHeight, kTileWidth, 0.0f);
      encode_storage(faces, o.dtype, kTileVolume,
                     out.data<std::byte>() + static_cast<size_t>(tr * tile_cols + tc) * bytes_per_tile);
    }
  }
  return out;
}

// A 2-D shard in ROW_MAJOR layout (an embedding table), read and converted a block of rows at a
// time: one box of the whole shard would hold two float32 copies of it (the read and the padded
// box), 4x a bfloat16 table's bytes at once.
Tensor load_row_major_rows(const Handle& d, const DatasetInfo& info, const Extent& rows, const Extent& cols,
                           const LoadOptions& o, float pad_value, const Shape& shard, const std::string& file,
                           const std::string& dataset) {
  constexpr int64_t kBlockRows = 256;
  Tensor out = Tensor::uninitialized(shard, o.dtype, Layout::ROW_MAJOR);
  if (o.dtype != DataType::FLOAT32 && o.dtype != DataType::BFLOAT16)
    throw Error(fmt::format("dataset '{}' in '{}': a ROW_MAJOR load converts to float32 or bfloat16, not {}", dataset,
                            file, to_string(o.dtype)));
  auto store_row = [&](int64_t r, const float* values) {
    for (int64_t c = 0; c < cols.size; ++c) {
      const float v = c < cols.valid ? values[c] : pad_value;
      if (o.dtype == DataType::FLOAT32)
        out.data<float>()[r * cols.size + c] = v;
      else
        out.data<uint16_t>()[r * cols.size + c] = float_to_bfloat16(v);
    }
  };
  for (int64_t r = 0; r < rows.valid; r += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows.valid - r);
    const std::vector<float> block = read_box(d, info, {rows.begin + r, cols.begin}, {n, cols.valid}, file, dataset);
    if (o.reject_non_finite) check_finite(block, file, dataset);
    for (int64_t i = 0; i < n; ++i) store_row(r + i, block.data() + i * cols.valid);
  }
  const std::vector<float> pad_row(static_cast<size_t>(cols.size), pad_value);
  for (int64_t r = rows.valid; r < rows.size; ++r) store_row(r, pad_row.data());
  return out;
}

Tensor load_local_shard(const std::string& file, const std::string& dataset, const MeshMapperConfig& mapper,
                        const MeshDevice& mesh, const LoadOptions& o, Shape& global_out, Placements& placements_out) {
  const Handle f = open_file(file);
  const Handle d = open_dataset(f, file, dataset);
  const DatasetInfo info = describe(d, file, dataset);
  check_expected_shape(info, o, file, dataset);
  if (o.transpose && info.shape.size() != 2)
    throw Error(fmt::format("dataset '{}' in '{}' has rank {}; a Linear weight is 2-D [out, in]", dataset, file,
                            info.shape.size()));
  std::vector<int64_t> loaded = info.shape;
  if (o.transpose) std::swap(loaded[0], loaded[1]);
  global_out = Shape(loaded);
  placements_out = normalize_placements(mapper.placements, global_out.rank());
  const Shape shard = shard_shape_for(global_out, placements_out, mesh.shape(), mapper.allow_padding);
  const std::vector<Extent> ext = shard_extents(global_out, placements_out, mesh, shard);

  if (o.transpose && o.layout == Layout::TILE) return load_transposed_tiles(d, info, ext[0], ext[1], o, file, dataset);
  if (!o.transpose && o.layout == Layout::ROW_MAJOR && info.shape.size() == 2)
    return load_row_major_rows(d, info, ext[0], ext[1], o, mapper.pad_value, shard, file, dataset);

  // Everything else is read as one box (activations, 1-D weights, row-major requests).
  std::vector<int64_t> start, count, sizes;
  for (const Extent& e : ext) {
    start.push_back(e.begin);
    count.push_back(e.valid);
    sizes.push_back(e.size);
  }
  if (o.transpose) {
    std::swap(start[0], start[1]);
    std::swap(count[0], count[1]);
  }
  std::vector<float> values = read_box(d, info, start, count, file, dataset);
  if (o.reject_non_finite) check_finite(values, file, dataset);
  if (o.transpose) {
    std::vector<float> t(values.size());
    for (int64_t r = 0; r < count[0]; ++r)
      for (int64_t c = 0; c < count[1]; ++c) t[static_cast<size_t>(c * count[0] + r)] = values[static_cast<size_t>(r * count[1] + c)];
    values.swap(t);
    std::swap(count[0], count[1]);
  }
  return Tensor::from_float(pad_box(values, count, sizes, mapper.pad_value), shard, o.dtype, o.layout);
}

}  // namespace

std::string_view to_string(StoredType t) {
  switch (t) {
    case StoredType::FLOAT32: return "float32";
    case StoredType::FLOAT16: return "float16";
    case StoredType::BFLOAT16: return "bfloat16";
    case StoredType::INT32: return "int32";
    case StoredType::INT64: return "int64";
  }
  return "?";
}

MeshTensor load_tensor(const std::string& file, const std::string& dataset, const MeshMapperConfig& mapper,
                       const MeshDevicePtr& mesh, const LoadOptions& options) {
  MESHNN_CHECK(mesh != nullptr && mesh->is_open(), "load_tensor needs an open MeshDevice");
  for (const Placement& p : mapper.placements)
    MESHNN_CHECK(!is_partial(p), "a loaded tensor cannot be placed as {}", to_string(p));
  Tensor local;
  Shape global;
  Placements placements;
  run_agreed(mesh->comm(), fmt::format("loading '{}' from '{}'", dataset, file),
             [&] { local = load_local_shard(file, dataset, mapper, *mesh, options, global, placements); });
  return MeshTensor(mesh, global, placements, std::move(local));
}

DatasetInfo inspect_dataset_local(const std::string& file, const std::string& dataset) {
  const Handle f = open_file(file);
  return describe(open_dataset(f, file, dataset), file, dataset);
}

std::vector<float> read_dataset_local(const std::string& file, const std::string& dataset, const LoadOptions& o) {
  const Handle f = open_file(file);
  const Handle d = open_dataset(f, file, dataset);
  const DatasetInfo info = describe(d, file, dataset);
  check_expected_shape(info, o, file, dataset);
  std::vector<int64_t> start(info.shape.size(), 0);
  std::vector<float> values = read_box(d, info, start, info.shape, file, dataset);
  if (o.reject_non_finite) check_finite(values, file, dataset);
  return values;
}

std::vector<int64_t> read_int_dataset_local(const std::string& file, const std::string& dataset, DatasetInfo* info_out) {
  const Handle f = open_file(file);
  const Handle d = open_dataset(f, file, dataset);
  const DatasetInfo info = describe(d, file, dataset);
  if (info.type != StoredType::INT32 && info.type != StoredType::INT64)
    throw Error(fmt::format("dataset '{}' in '{}' is stored as {}; integer data (token ids, lengths) must be int32 or int64",
                            dataset, file, to_string(info.type)));
  int64_t volume = 1;
  for (int64_t x : info.shape) volume *= x;
  std::vector<int64_t> values(static_cast<size_t>(volume));
  // HDF5 widens int32 to int64 itself; reading the whole extent needs no selection.
  if (volume > 0 && H5Dread(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw Error(fmt::format("reading dataset '{}' from '{}' failed (file truncated or corrupt?)", dataset, file));
  if (info_out != nullptr) *info_out = info;
  return values;
}

std::vector<int64_t> read_int_array_attribute_local(const std::string& file, const std::string& name) {
  const Handle f = open_file(file);
  if (H5Aexists(f.get(), name.c_str()) <= 0) return {};
  Handle a(H5Aopen(f.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return {};
  Handle type(H5Aget_type(a.get()), H5Tclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Sget_simple_extent_ndims(space.get()) != 1) return {};
  std::vector<int64_t> values(static_cast<size_t>(H5Sget_simple_extent_npoints(space.get())));
  if (!values.empty() && H5Aread(a.get(), H5T_NATIVE_INT64, values.data()) < 0)
    throw Error(fmt::format("reading attribute '{}' of '{}' failed (corrupt file?)", name, file));
  return values;
}

bool is_hdf5_file(const std::string& file) {
  detail::silence_hdf5_errors();
  return H5Fis_hdf5(file.c_str()) > 0;
}

std::optional<std::string> read_embedded_file_local(const std::string& file, const std::string& name) {
  const Handle f = open_file(file);
  // H5Lexists on "a/b" fails rather than answering when group "a" is missing: walk the path.
  for (size_t end = name.find('/'); ; end = name.find('/', end + 1)) {
    const std::string prefix = name.substr(0, end);
    if (prefix.empty() || H5Lexists(f.get(), prefix.c_str(), H5P_DEFAULT) <= 0) return std::nullopt;
    if (end == std::string::npos) break;
  }
  Handle d(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) throw Error(fmt::format("'{}' in '{}' is not a dataset (corrupt file?)", name, file));
  Handle type(H5Dget_type(d.get()), H5Tclose);
  Handle space(H5Dget_space(d.get()), H5Sclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 || H5Sget_simple_extent_ndims(space.get()) != 1)
    throw Error(fmt::format("dataset '{}' in '{}' must be 1-D uint8 (an embedded file)", name, file));
  std::string bytes(static_cast<size_t>(H5Sget_simple_extent_npoints(space.get())), '\0');
  if (!bytes.empty() && H5Dread(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    throw Error(fmt::format("reading dataset '{}' from '{}' failed (file truncated or corrupt?)", name, file));
  return bytes;
}

DatasetInfo inspect_dataset(const std::string& file, const std::string& dataset, const MeshDevicePtr& mesh) {
  DatasetInfo info;
  run_agreed(mesh->comm(), fmt::format("inspecting '{}' in '{}'", dataset, file),
             [&] { info = inspect_dataset_local(file, dataset); });
  return info;
}

namespace {
// The configuration attributes meshnn understands (Hugging Face config.json names). They are read
// by name: fuzzing found that iterating over a corrupted attribute table crashes libhdf5 1.10
// itself (H5A__close inside H5Aiterate2), while named look-ups fail cleanly.
constexpr const char* kConfigAttributes[] = {
    "model_type",          "hidden_size",     "intermediate_size",     "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "vocab_size",        "max_position_embeddings",
    "rms_norm_eps",        "rope_theta",      "tie_word_embeddings",   "meshnn_synthetic_seed",
    "head_dim",            "bos_token_id",    "eos_token_id",          "rope_scaling",
    "sliding_window"};

void collect_attribute(hid_t object, const char* name, Attributes& attrs) {
  if (H5Aexists(object, name) <= 0) return;
  Handle a(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return;
  Handle type(H5Aget_type(a.get()), H5Tclose);
  Handle space(H5Aget_space(a.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return;  // arrays: not configuration values
  switch (H5Tget_class(type.get())) {
    case H5T_INTEGER: {
      int64_t v = 0;
      if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) >= 0) attrs[name] = v;
      break;
    }
    case H5T_FLOAT: {
      double v = 0;
      if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) >= 0) attrs[name] = v;
      break;
    }
    case H5T_STRING:
      attrs[name] = string_attribute(object, name);
      break;
    case H5T_ENUM: {  // h5py stores Python bools as an int8 enum
      int8_t v = 0;
      if (H5Aread(a.get(), H5T_NATIVE_INT8, &v) >= 0) attrs[name] = static_cast<int64_t>(v);
      break;
    }
    default:
      break;
  }
}
}  // namespace

Attributes read_root_attributes_local(const std::string& file) {
  Attributes attrs;
  const Handle f = open_file(file);
  for (const char* name : kConfigAttributes) collect_attribute(f.get(), name, attrs);
  return attrs;
}

Attributes read_root_attributes(const std::string& file, const MeshDevicePtr& mesh) {
  Attributes attrs;
  run_agreed(mesh->comm(), fmt::format("reading attributes of '{}'", file),
             [&] { attrs = read_root_attributes_local(file); });
  return attrs;
}

int64_t required_int_attribute(const Attributes& attrs, const std::string& name, const std::string& file) {
  const auto it = attrs.find(name);
  MESHNN_CHECK(it != attrs.end(), "root attribute '{}' is missing from '{}'", name, file);
  if (const auto* i = std::get_if<int64_t>(&it->second)) return *i;
  if (const auto* d = std::get_if<double>(&it->second); d && *d == std::floor(*d)) return static_cast<int64_t>(*d);
  throw Error(fmt::format("root attribute '{}' of '{}' is not an integer", name, file));
}

}  // namespace meshnn::io
