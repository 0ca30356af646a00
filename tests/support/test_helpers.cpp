#include "support/test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "meshnn/core/hash.hpp"
#include "meshnn/distributed/distribute.hpp"

namespace meshnn::testing {

std::vector<float> transpose(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
  return t;
}

std::vector<float> normal_values(int64_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> seeded_values(int64_t count, uint64_t seed, bool integers) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t h = mix64(seed * 0x100000001B3ull + static_cast<uint64_t>(i));
    if (integers)
      v[static_cast<size_t>(i)] = static_cast<float>(static_cast<int64_t>(h % 2001) - 1000);
    else
      v[static_cast<size_t>(i)] = static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  return v;
}

Tensor seeded_tensor(const Shape& shape, DataType dtype, Layout layout, uint64_t seed) {
  std::vector<float> v = seeded_values(shape.volume(), seed, is_integer(dtype));
  if (dtype == DataType::UINT32)
    for (float& x : v) x = x < 0 ? -x : x;
  return Tensor::from_float(v, shape, dtype, layout);
}

bool all_ranks_ok(bool ok, MPI_Comm comm) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm);
  return all != 0;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  if (is_integer(a.dtype()) || a.dtype() == DataType::FLOAT32 || a.dtype() == DataType::BFLOAT16) {
    // Compare logical elements bit for bit (the padding of TILE storage may differ).
    const Tensor ra = is_block_float(a.dtype()) ? a : a.to_layout(Layout::ROW_MAJOR);
    const Tensor rb = is_block_float(b.dtype()) ? b : b.to_layout(Layout::ROW_MAJOR);
    return ra.size_bytes() == rb.size_bytes() && std::memcmp(ra.data<std::byte>(), rb.data<std::byte>(), ra.size_bytes()) == 0;
  }
  const std::vector<float> fa = a.to_float(), fb = b.to_float();
  return std::memcmp(fa.data(), fb.data(), fa.size() * sizeof(float)) == 0;
}

bool same_on_all_ranks(const std::string& s, MPI_Comm comm) {
  const uint64_t h = std::hash<std::string>{}(s);
  uint64_t lo = h, hi = h;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
  return lo == hi;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

std::vector<MeshShape> all_mesh_shapes(int n) {
  std::vector<MeshShape> shapes;
  for (int r = 1; r <= n; ++r)
    if (n % r == 0) shapes.push_back({r, n / r});
  return shapes;
}

MeshTensor with_logical_value(const Tensor& host, const Placements& placements, const MeshDevicePtr& mesh,
                              const Tensor& noise_axis0, const Tensor& noise_axis1) {
  Placements shard_only = placements;
  for (auto& p : shard_only)
    if (is_partial(p)) p = Replicate{};
  std::vector<float> local = distribute_tensor(host, MeshMapperConfig{shard_only}, mesh).local().to_float();
  const int position[2] = {mesh->coordinate().row, mesh->coordinate().col};
  if ((is_partial(placements[0]) && position[0] != 0) || (is_partial(placements[1]) && position[1] != 0))
    std::fill(local.begin(), local.end(), 0.0f);
  for (int axis = 0; axis < 2; ++axis) {
    if (!is_partial(placements[axis])) continue;
    const int n = axis == 0 ? mesh->num_rows() : mesh->num_cols();
    const float c = position[axis] == 0 ? -static_cast<float>(n * (n - 1) / 2) : static_cast<float>(position[axis]);
    const Tensor& noise = axis == 0 ? noise_axis0 : noise_axis1;
    const std::vector<float> v = distribute_tensor(noise, MeshMapperConfig{shard_only}, mesh).local().to_float();
    for (size_t i = 0; i < local.size(); ++i) local[i] += c * v[i];
  }
  const Shape shard = shard_shape_for(host.shape(), placements, mesh->shape(), false);
  return MeshTensor(mesh, host.shape(), placements, Tensor::from_float(local, shard, DataType::FLOAT32, Layout::TILE));
}

bool matmul_close_to_float64(const Tensor& x, const Tensor& w, const Tensor& got, DataType out_dtype) {
  const std::vector<float> xs = x.to_float(), ws = w.to_float(), gs = got.to_float();
  const int64_t m = x.shape()[-2], k = x.shape()[-1], n = w.shape()[-1], batch = x.shape().volume() / (m * k);
  // bfloat16 activations are multiplied as stored; block floats share an exponent per 16 values.
  const double unit = out_dtype == DataType::FLOAT32 ? 0x1p-24 : out_dtype == DataType::BFLOAT16 ? 0x1p-8 : 0x1p-6;
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double term = static_cast<double>(xs[static_cast<size_t>((t * m + i) * k + p)]) * ws[static_cast<size_t>(p * n + j)];
          sum += term;
          magnitude += std::abs(term);
        }
        const double g = gs[static_cast<size_t>((t * m + i) * n + j)];
        // Block floats round to the block's largest exponent: allow the row's magnitude scale.
        if (std::abs(g - sum) > 2 * unit * magnitude + k * 0x1p-24 * magnitude + 1e-6) return false;
      }
  return true;
}

}  // namespace meshnn::testing
