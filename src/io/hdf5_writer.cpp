#include <unistd.h>

#include <cstdio>
#include <utility>

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
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a.get(), type.get(), value.c_str()) < 0)
    throw Error(fmt::format("cannot write attribute '{}'", name));
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
  MESHNN_CHECK(type == StoredType::FLOAT32 || type == StoredType::BFLOAT16 || type == StoredType::INT32,
               "datasets are written as float32, bfloat16 or int32, not {}", to_string(type));
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
  const hid_t file_type = type == StoredType::FLOAT32 ? H5T_IEEE_F32LE
                          : type == StoredType::INT32 ? H5T_STD_I32LE
                                                      : H5T_STD_U16LE;
  Handle d(H5Dcreate2(state_->handle.get(), name.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
           H5Dclose);
  MESHNN_CHECK(d.valid(), "cannot create dataset '{}' in '{}'", name, state_->file);
  if (type == StoredType::BFLOAT16) write_string_attribute(d.get(), "dtype", "bfloat16");
}

namespace {

// What the writer created a dataset as, told apart by its file type (a bfloat16 dataset is the
// only 2-byte integer one the writer makes).
StoredType written_type(hid_t dataset) {
  Handle type(H5Dget_type(dataset), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) return StoredType::FLOAT32;
  return H5Tget_size(type.get()) == 2 ? StoredType::BFLOAT16 : StoredType::INT32;
}

// Writes `count` values of `memory_type` at `data` as whole rows from row_begin on, after checking
// that they fit. `prepare` may convert the values first (bfloat16) and returns the buffer to write.
template <class Prepare>
void write_row_block(hid_t file_handle, const std::string& file, const std::string& name, int64_t row_begin,
                     size_t count, bool want_int, Prepare&& prepare) {
  Handle d(H5Dopen2(file_handle, name.c_str(), H5P_DEFAULT), H5Dclose);
  MESHNN_CHECK(d.valid(), "no dataset '{}' in '{}' to write to", name, file);
  const StoredType stored = written_type(d.get());
  MESHNN_CHECK((stored == StoredType::INT32) == want_int, "write_rows: {} values given for dataset '{}' of '{}', stored as {}",
               want_int ? "int32" : "float", name, file, to_string(stored));
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
  const auto [memory_type, buffer] = prepare(stored);
  const herr_t rc = H5Dwrite(d.get(), memory_type, mem_space.get(), file_space.get(), H5P_DEFAULT, buffer);
  MESHNN_CHECK(rc >= 0, "writing dataset '{}' of '{}' failed (disk full?)", name, file);
}

}  // namespace

void Hdf5Writer::write_rows(const std::string& name, int64_t row_begin, std::span<const float> values) {
  std::vector<uint16_t> bits;
  write_row_block(state_->handle.get(), state_->file, name, row_begin, values.size(), false,
                  [&](StoredType stored) -> std::pair<hid_t, const void*> {
                    if (stored != StoredType::BFLOAT16) return {H5T_NATIVE_FLOAT, values.data()};
                    bits.resize(values.size());
                    float_to_bfloat16(values, bits);
                    return {H5T_NATIVE_UINT16, bits.data()};
                  });
}

void Hdf5Writer::write_rows(const std::string& name, int64_t row_begin, std::span<const int32_t> values) {
  write_row_block(state_->handle.get(), state_->file, name, row_begin, values.size(), true,
                  [&](StoredType) -> std::pair<hid_t, const void*> { return {H5T_NATIVE_INT32, values.data()}; });
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
