#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "hdf5_handles.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/tensor/bfloat16.hpp"

namespace meshnn::io {

using detail::Handle;

struct Hdf5Writer::State {
  std::string file, temporary;
  Handle handle;
  bool committed = false;
};

namespace {

void write_string_attribute(hid_t object, const char* name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(value.size(), 1));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  // Marked UTF-8 when it is more than ASCII, so readers decode it as such.
  if (std::any_of(value.begin(), value.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }))
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a.get(), type.get(), value.c_str()) < 0)
    throw Error(fmt::format("cannot write attribute '{}'", name));
}

// IEEE half precision, little-endian. HDF5 1.10 predefines no 16-bit float; this is the type h5py
// and numpy's float16 write, so files read the same either way.
Handle float16_type() {
  Handle t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

}  // namespace

Hdf5Writer::Hdf5Writer(std::string file) : state_(std::make_unique<State>()) {
  detail::silence_hdf5_errors();
  state_->file = std::move(file);
  state_->temporary = fmt::format("{}.tmp.{}", state_->file, getpid());
  state_->handle = Handle(H5Fcreate(state_->temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  MESHNN_CHECK(state_->handle.valid(), "cannot create '{}' (is the directory writable?)", state_->file);
}

Hdf5Writer::~Hdf5Writer() {
  if (state_ && !state_->committed) {
    state_->handle.reset();
    std::remove(state_->temporary.c_str());
  }
}

void Hdf5Writer::create_dataset(const std::string& name, const std::vector<int64_t>& shape, StoredType type,
                                bool chunked, int deflate_level) {
  MESHNN_CHECK(type == StoredType::FLOAT32 || type == StoredType::FLOAT16 || type == StoredType::BFLOAT16 ||
                   type == StoredType::INT32,
               "datasets are written as float32, float16, bfloat16 or int32, not {}", to_string(type));
  MESHNN_CHECK(!shape.empty(), "dataset '{}' needs at least one dim", name);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (chunked || deflate_level > 0) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], 64));
    for (hsize_t& c : chunk) c = std::max<hsize_t>(c, 1);
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (deflate_level > 0) H5Pset_deflate(dcpl.get(), static_cast<unsigned>(deflate_level));
  }
  const Handle half = float16_type();
  const hid_t file_type = type == StoredType::FLOAT32   ? H5T_IEEE_F32LE
                          : type == StoredType::FLOAT16 ? half.get()
                          : type == StoredType::INT32   ? H5T_STD_I32LE
                                                        : H5T_STD_U16LE;
  // Intermediate groups are created, so names like "tokenizer/tokenizer.json" work.
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(state_->handle.get(), name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  MESHNN_CHECK(d.valid(), "cannot create dataset '{}' in '{}'", name, state_->file);
  if (type == StoredType::BFLOAT16) write_string_attribute(d.get(), "dtype", "bfloat16");
}

namespace {

// What the writer created a dataset as, told apart by its file type (a bfloat16 dataset is the
// only 2-byte integer one the writer makes).
StoredType written_type(hid_t dataset) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    return H5Tget_size(type.get()) == 2 ? StoredType::FLOAT16 : StoredType::FLOAT32;
  return H5Tget_size(type.get()) == 2 ? StoredType::BFLOAT16 : StoredType::INT32;
}

// What a write_* call hands over: floats, int32 values, or bytes already in the stored format.
enum class Given { FLOATS, INT32S, STORED_BYTES };

// Writes `count` values (bytes for STORED_BYTES) as whole rows from row_begin on, after checking
// that they fit. `prepare` may convert the values first (bfloat16) and returns the memory type and
// the buffer to write.

template <class Prepare>
void write_row_block(hid_t file_handle, const std::string& file, const std::string& name, int64_t row_begin,
                     size_t count, Given given, Prepare&& prepare) {
  Handle d(H5Dopen2(file_handle, name.c_str(), H5P_DEFAULT), H5Dclose);
  MESHNN_CHECK(d.valid(), "no dataset '{}' in '{}' to write to", name, file);
  const StoredType stored = written_type(d.get());
  MESHNN_CHECK(given == Given::STORED_BYTES || (stored == StoredType::INT32) == (given == Given::INT32S),
               "write_rows: {} values given for dataset '{}' of '{}', stored as {}",
               given == Given::INT32S ? "int32" : "float", name, file, to_string(stored));
  if (given == Given::STORED_BYTES) {
    Handle type(H5Dget_type(d.get()), H5Tclose);
    const size_t element = H5Tget_size(type.get());
    MESHNN_CHECK(count % element == 0, "write_stored_rows: {} bytes are not whole {}-byte elements of dataset '{}'",
                 count, element, name);
    count /= element;
  }
  Handle file_space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(file_space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr);
  hsize_t row_size = 1;
  for (int i = 1; i < rank; ++i) row_size *= dims[static_cast<size_t>(i)];
  const hsize_t rows = row_size == 0 ? 0 : count / row_size;
  MESHNN_CHECK(row_begin >= 0 && rows * row_size == count && static_cast<hsize_t>(row_begin) + rows <= dims[0],
               "write_rows: {} values at row {} do not fit dataset '{}'", count, row_begin, name);
  if (rows == 0) return;
  std::vector<hsize_t> start(static_cast<size_t>(rank), 0), box = dims;
  start[0] = static_cast<hsize_t>(row_begin);
  box[0] = rows;
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, box.data(), nullptr);
  Handle mem_space(H5Screate_simple(rank, box.data(), nullptr), H5Sclose);
  const auto [memory_type, buffer] = prepare(stored, d.get());
  const herr_t rc = H5Dwrite(d.get(), memory_type, mem_space.get(), file_space.get(), H5P_DEFAULT, buffer);
  MESHNN_CHECK(rc >= 0, "writing dataset '{}' of '{}' failed (disk full?)", name, file);
}

}  // namespace

void Hdf5Writer::write_rows(const std::string& name, int64_t row_begin, std::span<const float> values) {
  std::vector<uint16_t> bits;
  write_row_block(state_->handle.get(), state_->file, name, row_begin, values.size(), Given::FLOATS,
                  [&](StoredType stored, hid_t) -> std::pair<hid_t, const void*> {
                    if (stored != StoredType::BFLOAT16) return {H5T_NATIVE_FLOAT, values.data()};
                    bits.resize(values.size());
                    float_to_bfloat16(values, bits);
                    return {H5T_NATIVE_UINT16, bits.data()};
                  });
}

void Hdf5Writer::write_rows(const std::string& name, int64_t row_begin, std::span<const int32_t> values) {
  write_row_block(state_->handle.get(), state_->file, name, row_begin, values.size(), Given::INT32S,
                  [&](StoredType, hid_t) -> std::pair<hid_t, const void*> { return {H5T_NATIVE_INT32, values.data()}; });
}

void Hdf5Writer::write_stored_rows(const std::string& name, int64_t row_begin, std::span<const std::byte> bytes) {
  // The memory type is the dataset's own file type, so HDF5 copies the bytes without converting.
  Handle type;
  write_row_block(state_->handle.get(), state_->file, name, row_begin, bytes.size(), Given::STORED_BYTES,
                  [&](StoredType, hid_t dataset) -> std::pair<hid_t, const void*> {
                    type = Handle(H5Dget_type(dataset), H5Tclose);
                    return {type.get(), bytes.data()};
                  });
}

void Hdf5Writer::write_bytes(const std::string& name, std::span<const std::byte> bytes) {
  const hsize_t size = bytes.size();
  Handle space(H5Screate_simple(1, &size, nullptr), H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(state_->handle.get(), name.c_str(), H5T_STD_U8LE, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
  MESHNN_CHECK(d.valid(), "cannot create dataset '{}' in '{}'", name, state_->file);
  MESHNN_CHECK(size == 0 || H5Dwrite(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0,
               "writing dataset '{}' of '{}' failed (disk full?)", name, state_->file);
}

void Hdf5Writer::write_strings(const std::string& name, std::span<const std::string> values) {
  const hsize_t size = values.size();
  Handle space(H5Screate_simple(1, &size, nullptr), H5Sclose);
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle d(H5Dcreate2(state_->handle.get(), name.c_str(), type.get(), space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
           H5Dclose);
  MESHNN_CHECK(d.valid(), "cannot create dataset '{}' in '{}'", name, state_->file);
  std::vector<const char*> pointers;
  for (const std::string& v : values) pointers.push_back(v.c_str());
  MESHNN_CHECK(size == 0 || H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) >= 0,
               "writing dataset '{}' of '{}' failed (disk full?)", name, state_->file);
}

void Hdf5Writer::set_int_array_attribute(const std::string& name, std::span<const int64_t> values) {
  const hid_t root = state_->handle.get();
  if (H5Aexists(root, name.c_str()) > 0) H5Adelete(root, name.c_str());
  const hsize_t size = values.size();
  Handle space(H5Screate_simple(1, &size, nullptr), H5Sclose);
  Handle a(H5Acreate2(root, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  MESHNN_CHECK(a.valid() && H5Awrite(a.get(), H5T_NATIVE_INT64, values.data()) >= 0,
               "cannot write attribute '{}' to '{}'", name, state_->file);
}

void Hdf5Writer::set_attribute(const std::string& name, const AttributeValue& value) {
  const hid_t root = state_->handle.get();
  if (H5Aexists(root, name.c_str()) > 0) H5Adelete(root, name.c_str());
  if (const auto* s = std::get_if<std::string>(&value)) {
    write_string_attribute(root, name.c_str(), *s);
    return;
  }
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const bool is_int = std::holds_alternative<int64_t>(value);
  const hid_t type = is_int ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
  Handle a(H5Acreate2(root, name.c_str(), is_int ? H5T_STD_I64LE : H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  const herr_t rc = is_int ? H5Awrite(a.get(), type, &std::get<int64_t>(value)) : H5Awrite(a.get(), type, &std::get<double>(value));
  MESHNN_CHECK(a.valid() && rc >= 0, "cannot write attribute '{}' to '{}'", name, state_->file);
}

void Hdf5Writer::commit() {
  MESHNN_CHECK(!state_->committed, "'{}' was already committed", state_->file);
  const herr_t rc = H5Fclose(state_->handle.get());
  state_->handle = Handle();
  if (rc < 0 || std::rename(state_->temporary.c_str(), state_->file.c_str()) != 0) {
    std::remove(state_->temporary.c_str());
    throw Error(fmt::format("cannot finish writing '{}' (disk full or directory not writable?)", state_->file));
  }
  state_->committed = true;
}

void write_file(const std::string& file, const std::vector<NamedTensor>& tensors, const Attributes& root_attributes) {
  Hdf5Writer writer(file);
  for (const NamedTensor& t : tensors) {
    writer.create_dataset(t.dataset, t.tensor->shape().to_vector(), StoredType::FLOAT32);
    writer.write_rows(t.dataset, 0, t.tensor->to_float());
  }
  for (const auto& [name, value] : root_attributes) writer.set_attribute(name, value);
  writer.commit();
}

}  // namespace meshnn::io
