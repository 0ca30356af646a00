#include "meshnn/distributed/summa.hpp"

#include <fmt/format.h>

#include <numeric>
#include <vector>

#include "meshnn/ccl/plan.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/ops/eltwise.hpp"
#include "meshnn/ops/matmul.hpp"
#include "meshnn/tensor/concat.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::distributed {
namespace {

constexpr std::string_view kOp = "summa";
constexpr int64_t kMaxDefaultPanel = 512;

// Shard(d) on an axis of more than one device, Replicate on an axis of one.
Placements on_mesh(MeshShape mesh, int d0, int d1) {
  Placements p{Replicate{}, Replicate{}};
  if (mesh.rows > 1) p[0] = Shard{d0};
  if (mesh.cols > 1) p[1] = Shard{d1};
  return p;
}

// Placements as they act on this mesh: whatever an axis of one device says is no split.
Placements effective(const Placements& p, int rank, MeshShape mesh) {
  Placements e = normalize_placements(p, rank);
  if (mesh.rows == 1) e[0] = Replicate{};
  if (mesh.cols == 1) e[1] = Replicate{};
  return e;
}

bool float_format(DataType d) { return d == DataType::FLOAT32 || d == DataType::BFLOAT16 || d == DataType::BFLOAT8_B || d == DataType::BFLOAT4_B; }

}  // namespace

Placements summa_a_placements(int a_rank, MeshShape mesh) { return on_mesh(mesh, a_rank - 2, a_rank - 1); }
Placements summa_b_placements(MeshShape mesh) { return on_mesh(mesh, 0, 1); }
Placements summa_c_placements(int c_rank, MeshShape mesh) { return on_mesh(mesh, c_rank - 2, c_rank - 1); }

int64_t summa_panel_width(int64_t k, MeshShape mesh, int64_t requested) {
  MESHNN_CHECK(k > 0 && k % mesh.cols == 0 && k % mesh.rows == 0,
               "{}: K = {} must split evenly over the {} mesh columns (A) and the {} mesh rows (B)", kOp, k, mesh.cols,
               mesh.rows);
  const int64_t common = std::gcd(k / mesh.cols, k / mesh.rows);
  if (requested != 0) {
    MESHNN_CHECK(requested > 0 && common % requested == 0,
                 "{}: panel width {} must divide both K blocks (K/cols = {}, K/rows = {}) so that no panel straddles two "
                 "owners", kOp, requested, k / mesh.cols, k / mesh.rows);
    return requested;
  }
  if (common <= kMaxDefaultPanel || common % 32 != 0) return common;
  for (int64_t w = kMaxDefaultPanel; w >= 32; w -= 32)
    if (common % w == 0) return w;
  return common;
}

void check_summa(const Shape& a, DataType a_dtype, Layout a_layout, const Placements& a_placements, const Shape& b,
                 DataType b_dtype, Layout b_layout, const Placements& b_placements, MeshShape mesh,
                 const SummaOptions& options) {
  MESHNN_CHECK(a.rank() >= 2 && b.rank() == 2, "{}: needs A [..., M, K] and B [K, N], got A {} and B {}", kOp, a, b);
  MESHNN_CHECK(a[-1] == b[0], "{}: inner dims differ: A {} and B {}", kOp, a, b);
  MESHNN_CHECK(a_layout == Layout::TILE && b_layout == Layout::TILE, "{}: operands must be in TILE layout", kOp);
  MESHNN_CHECK(a_dtype == DataType::FLOAT32 || a_dtype == DataType::BFLOAT16,
               "{}: activations must be float32 or bfloat16, got {}", kOp, to_string(a_dtype));
  MESHNN_CHECK(float_format(b_dtype), "{}: weights must be float32, bfloat16, bfloat8_b or bfloat4_b, got {}", kOp,
               to_string(b_dtype));
  const DataType out = options.output_dtype.value_or(a_dtype);
  MESHNN_CHECK(float_format(out), "{}: output dtype must be a float format, got {}", kOp, to_string(out));
  MESHNN_CHECK(options.lookahead >= 1, "{}: lookahead must be >= 1, got {}", kOp, options.lookahead);
  const Placements want_a = summa_a_placements(a.rank(), mesh), want_b = summa_b_placements(mesh);
  MESHNN_CHECK(effective(a_placements, a.rank(), mesh) == want_a && effective(b_placements, 2, mesh) == want_b,
               "{}: on a {} mesh A must be {} and B {} (M and K of A over rows and columns, K and N of B), got A {} "
               "and B {}",
               kOp, mesh.to_string(), to_string(want_a), to_string(want_b), to_string(a_placements),
               to_string(b_placements));
  MESHNN_CHECK(a[-2] % mesh.rows == 0 && b[1] % mesh.cols == 0,
               "{}: M = {} must split evenly over {} mesh rows and N = {} over {} mesh columns", kOp, a[-2], mesh.rows,
               b[1], mesh.cols);
  summa_panel_width(a[-1], mesh, options.panel_width);
}

MeshTensor summa(const MeshTensor& a, const MeshTensor& b, const SummaOptions& options) {
  MESHNN_CHECK(a.mesh() == b.mesh(), "{}: A and B are on different meshes", kOp);
  MeshDevice& mesh = a.mesh_device();
  const MeshShape ms = mesh.shape();
  check_summa(a.shape(), a.dtype(), a.layout(), a.placements(), b.shape(), b.dtype(), b.layout(), b.placements(), ms,
              options);
  MESHNN_CHECK(options.num_links >= 1 && options.num_links <= ccl::kMaxLinks, "{}: num_links must be 1..{}, got {}",
               kOp, ccl::kMaxLinks, options.num_links);
  const int rows = ms.rows, cols = ms.cols;
  const MeshCoordinate me = mesh.coordinate();
  const int64_t k = a.shape()[-1], width = summa_panel_width(k, ms, options.panel_width), panels = k / width;
  const int64_t a_block = k / cols, b_block = k / rows;  // K each mesh column holds of A, each mesh row of B
  const Tensor& x = a.local();
  const Tensor& w = b.local();

  Shape a_panel = x.shape(), b_panel = w.shape();
  a_panel[-1] = width;
  b_panel[0] = width;
  const size_t a_bytes = Tensor::storage_bytes(a_panel, x.dtype(), Layout::TILE);
  const size_t b_bytes = Tensor::storage_bytes(b_panel, w.dtype(), Layout::TILE);
  const size_t b_tile_row_bytes = Tensor::storage_bytes(Shape{kTileHeight, w.shape()[1]}, w.dtype(), Layout::TILE);
  // Panel buffers, reused round-robin: panel p lives in slot p mod slots.
  const int slots = static_cast<int>(std::min<int64_t>(panels, options.lookahead + 1));
  std::vector<Tensor> a_slots, b_slots;
  for (int s = 0; s < slots; ++s) {
    a_slots.push_back(Tensor::uninitialized(a_panel, x.dtype(), Layout::TILE));
    b_slots.push_back(Tensor::uninitialized(b_panel, w.dtype(), Layout::TILE));
  }
  // The whole mesh's communicator carries both axes' broadcasts (position = device id), so that one
  // progress loop drives them and the products.
  std::vector<int> row_members(static_cast<size_t>(cols)), column_members(static_cast<size_t>(rows));
  for (int c = 0; c < cols; ++c) row_members[static_cast<size_t>(c)] = mesh.device_id_of({me.row, c});
  for (int r = 0; r < rows; ++r) column_members[static_cast<size_t>(r)] = mesh.device_id_of({r, me.col});
  const Topology topology = options.topology.value_or(mesh.topology());
  const TransportKind kind = mesh.transport_kind();
  const ccl::Schedule a_schedule =
      ccl::choose_schedule(ccl::Collective::BROADCAST, cols, a_bytes, topology, kind, options.ccl);
  const ccl::Schedule b_schedule =
      ccl::choose_schedule(ccl::Collective::BROADCAST, rows, b_bytes, topology, kind, options.ccl);

  ccl::MpiTransport transport(mesh.comm(), kind, [&mesh](int id) {
    return fmt::format("device {} {}", id, mesh.coordinate_of(id).to_string());
  });
  const double watchdog = options.ccl.watchdog_seconds > 0 ? options.ccl.watchdog_seconds : ccl::watchdog_seconds_from_env();
  ccl::Plan plan(transport, std::string(kOp), ccl::tag_base_for(mesh.next_operation_id(), transport), watchdog);

  MatmulOptions float32_product;
  float32_product.output_dtype = DataType::FLOAT32;
  Tensor sum;  // C's block, float32
  std::vector<ccl::OpId> product_of(static_cast<size_t>(panels));
  std::vector<ccl::Deps> slot_users(static_cast<size_t>(panels));  // what must finish before a slot is reused
  for (int64_t p = 0; p < panels; ++p) {
    const int s = static_cast<int>(p % slots);
    const int step = static_cast<int>(p);
    ccl::Deps free;  // the slot's previous panel multiplied and sent on
    if (p >= slots) free = slot_users[static_cast<size_t>(p - slots)];
    // A's panel: from mesh column owner_col, at offset a_off of its K block.
    const int owner_col = static_cast<int>(p * width / a_block), owner_row = static_cast<int>(p * width / b_block);
    const int64_t a_off = p * width - owner_col * a_block, b_off = p * width - owner_row * b_block;
    ccl::Deps a_ready = free, b_ready = free, multiply_after;
    if (me.col == owner_col) {
      a_ready = {plan.local(step, [&, s, a_off] {
        const Tensor part = slice(x, x.shape().rank() - 1, a_off, a_off + width);
        copy_bytes(a_slots[static_cast<size_t>(s)].data<std::byte>(), part.data<std::byte>(), a_bytes);
      }, free)};
      multiply_after.push_back(a_ready[0]);
    }
    if (me.row == owner_row) {
      // B's rows [b_off, b_off + width): whole tile rows lie together in storage and are copied as
      // they are; a panel that cuts tiles is repacked by slice().
      b_ready = {plan.local(step, [&, s, b_off] {
        std::byte* slot = b_slots[static_cast<size_t>(s)].data<std::byte>();
        if (b_off % kTileHeight == 0 && width % kTileHeight == 0) {
          copy_bytes(slot, w.data<std::byte>() + b_off / kTileHeight * b_tile_row_bytes, b_bytes);
          return;
        }
        const Tensor part = slice(w, 0, b_off, b_off + width);
        copy_bytes(slot, part.data<std::byte>(), b_bytes);
      }, free)};
      multiply_after.push_back(b_ready[0]);
    }
    const ccl::BroadcastOps along_row =
        ccl::add_broadcast(plan, row_members, me.col, owner_col, a_slots[static_cast<size_t>(s)].data<std::byte>(),
                           a_bytes, a_schedule, options.num_links, 0, a_ready);
    const ccl::BroadcastOps along_column =
        ccl::add_broadcast(plan, column_members, me.row, owner_row, b_slots[static_cast<size_t>(s)].data<std::byte>(),
                           b_bytes, b_schedule, options.num_links, 1, b_ready);
    for (const auto* ops : {&along_row, &along_column})
      for (ccl::OpId r : ops->received)
        if (r >= 0) multiply_after.push_back(r);
    // Products in panel order: the float32 sum's order is fixed whatever the arrivals.
    if (p > 0) multiply_after.push_back(product_of[static_cast<size_t>(p - 1)]);
    const ccl::OpId product = plan.local(step, [&, s, p] {
      Tensor term = matmul(a_slots[static_cast<size_t>(s)], b_slots[static_cast<size_t>(s)], false, false, float32_product);
      if (p == 0) {
        sum = std::move(term);
        return;
      }
      add_into(sum, term, sum);
    }, multiply_after);
    product_of[static_cast<size_t>(p)] = product;
    ccl::Deps& users = slot_users[static_cast<size_t>(p)];
    users.push_back(product);
    for (const auto* ops : {&along_row, &along_column}) users.insert(users.end(), ops->sent.begin(), ops->sent.end());
  }
  plan.run();

  Shape c_shape = a.shape();
  c_shape[-1] = b.shape()[1];
  const DataType out = options.output_dtype.value_or(a.dtype());
  if (sum.dtype() != out) sum = sum.typecast(out);
  return MeshTensor(a.mesh(), c_shape, summa_c_placements(c_shape.rank(), ms), std::move(sum));
}

}  // namespace meshnn::distributed
