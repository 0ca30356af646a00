// meshnn-ccl-bench: nccl-tests-style sweep of meshnn's collectives, with MPI's own collective on
// the same data in the same run.
//
//   mpirun -np 2 meshnn-ccl-bench -b 1M -e 256M -f 2 [-c all] [-d float32] [-w 5] [-n 20]
//          [--topology ring] [--algo auto] [--links 1] [--chunk 0] [--json out.json]
//
// Sizes are nccl-tests' S: all_gather = the gathered output, reduce_scatter and all_to_all = one
// rank's input, all_reduce = the buffer. Time = the slowest rank's mean over -n iterations after
// -w warm-ups, run in rounds that alternate with MPI's (see time_pair);
// algbw = S / time; busbw = algbw * (n-1)/n (gather, scatter, all_to_all) or * 2(n-1)/n (all_reduce).
// ratio = MPI time / our time (= our busbw / MPI busbw; > 1 means faster than MPI).
// #wrong: elements differing from MPI's result (inputs are small integers, so every summation
// order is exact), summed over ranks. For 16-bit and block dtypes MPI gathers (MPI_Allgather) and
// exchanges (MPI_Alltoall) the same bytes and reduces the same values in float32.
#include <fmt/format.h>
#include <malloc.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/io/json_output.hpp"
#include "meshnn/runtime/cli.hpp"

namespace meshnn {
namespace {

double slowest(double t, MPI_Comm comm) {
  double m = 0;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, comm);
  return m;
}

// Mean time per iteration of ours() and mpi() on the slowest rank. The timed iterations run in
// up to kRounds rounds that alternate between the two (ours first, then MPI first, ...), so a slow
// spell of a shared machine lands on both rather than on whichever happened to run then. Ten
// rather than four spread such spells more evenly: with four, the same code's 2-8 MiB all_gather
// came out anywhere from 0.81x to 1.06x of MPI's time from run to run on the noisy 2-core VM.
struct PairTimes {
  double ours = 0, mpi = 0;
};
template <class Ours, class Mpi>
PairTimes time_pair(int warmup, int iters, MPI_Comm comm, Ours&& ours, Mpi&& mpi) {
  for (int i = 0; i < warmup; ++i) ours();
  for (int i = 0; i < warmup; ++i) mpi();
  constexpr int kRounds = 10;
  const int rounds = std::min(iters, kRounds);
  PairTimes total;
  auto timed = [&](auto& fn, int count) {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < count; ++i) fn();
    return slowest(MPI_Wtime() - t0, comm);
  };
  for (int r = 0; r < rounds; ++r) {
    const int count = iters / rounds + (r < iters % rounds ? 1 : 0);
    if (r % 2 == 0) {
      total.ours += timed(ours, count);
      total.mpi += timed(mpi, count);
    } else {
      total.mpi += timed(mpi, count);
      total.ours += timed(ours, count);
    }
  }
  return {total.ours / iters, total.mpi / iters};
}

// Small integers: exact in every dtype here and in every summation order; never negative for
// uint32 (MPI's reference sums them as int32, which agrees only on values both types hold).
std::vector<float> bench_values(int64_t count, int rank, DataType dtype) {
  const int offset = dtype == DataType::UINT32 ? 0 : 15;
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 7 + rank * 13) % 31 - offset);
  return v;
}

Tensor make_tensor(const std::vector<float>& v, DataType dtype) {
  const Shape shape{1, static_cast<int64_t>(v.size())};
  const Layout layout = is_block_float(dtype) ? Layout::TILE : Layout::ROW_MAJOR;
  return Tensor::from_float(v, shape, dtype, layout);
}

// MPI's buffers come from the allocator of our tensors, so both sides of a comparison get the same
// page size and alignment. It matters: Open MPI's single-copy transfer (process_vm_readv) is
// several times slower when the two buffers sit differently in their pages
// (docs/design-measurements.md §9).
template <class T>
class MpiBuffer {
 public:
  explicit MpiBuffer(size_t count) : count_(count), data_(allocate_buffer(count * sizeof(T))) {
    if (!data_) throw Error(fmt::format("out of memory allocating a {}-byte MPI buffer", count * sizeof(T)));
  }
  template <class U>
  explicit MpiBuffer(const std::vector<U>& values) : MpiBuffer(values.size()) {
    for (size_t i = 0; i < count_; ++i) data()[i] = static_cast<T>(values[i]);
  }
  T* data() { return reinterpret_cast<T*>(data_.get()); }
  const T* data() const { return reinterpret_cast<const T*>(data_.get()); }
  size_t size() const { return count_; }

 private:
  struct Release {
    void operator()(std::byte* p) const { release_buffer(p); }
  };
  size_t count_;
  std::unique_ptr<std::byte, Release> data_;
};

// Collectives that move bytes: how many of ours differ from MPI's.
int64_t bytes_differing(const MpiBuffer<std::byte>& mpi, const Tensor& ours) {
  const std::byte* got = ours.data<std::byte>();
  if (std::memcmp(mpi.data(), got, mpi.size()) == 0) return 0;
  int64_t wrong = 0;
  for (size_t i = 0; i < mpi.size(); ++i) wrong += mpi.data()[i] != got[i];
  return wrong;
}

int64_t count_wrong(const Tensor& ours, const MpiBuffer<float>& mpi) {
  const std::vector<float> v = ours.to_float();
  int64_t wrong = 0;
  for (size_t i = 0; i < v.size(); ++i) wrong += v[i] != mpi.data()[i];
  return wrong;
}

// MPI's reduce_scatter and all_reduce take a temporary buffer from malloc on every call. glibc
// maps large ones fresh each time (4 KiB page faults; docs/design-measurements.md §9) unless a
// free happened to raise its mmap threshold first, so MPI's time
// would depend on the malloc history of the process. "reuse" gives MPI its best case at every
// size: heap only, never trimmed, so a temporary's pages stay faulted in from call to call.
// meshnn's own large buffers are mappings of their own where huge pages are on (allocate_buffer),
// so this reaches MPI only there.
void configure_malloc_for_mpi(const std::string& mode) {
  if (mode != "reuse") return;
  MESHNN_CHECK(mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1,
               "meshnn-ccl-bench: mallopt refused the heap-only setting");
}

struct BenchOptions {
  int64_t min_bytes = int64_t{1} << 20, max_bytes = int64_t{256} << 20, factor = 2;
  int warmup = 5, iters = 20, links = 1;
  std::vector<std::string> collectives;
  DataType dtype = DataType::FLOAT32;
  Topology topology = Topology::RING;
  CclOptions ccl;
  std::string json, mpi_malloc = "reuse";
};

BenchOptions parse_options(int argc, char** argv) {
  BenchOptions o;
  int64_t chunk = 0;
  std::string which = "all", dtype_name = "float32", topology_name = "ring", algo = "auto";
  CLI::App cli("nccl-tests-style benchmark of meshnn's collectives against MPI's own", "meshnn-ccl-bench");
  // nccl-tests' short options beside the long ones.
  cli.add_option("-b,--minbytes", o.min_bytes, "smallest size")->transform(SizeRange(4, int64_t{1} << 40))->default_str("1M");
  cli.add_option("-e,--maxbytes", o.max_bytes, "largest size")->transform(SizeRange(4, int64_t{1} << 40))->default_str("256M");
  cli.add_option("-f,--stepfactor", o.factor, "size multiplier between rows")->transform(IntRange(2, 1024));
  cli.add_option("-c,--collective", which, "collectives to run")
      ->check(CLI::IsMember({"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "all"}));
  cli.add_option("-d,--dtype", dtype_name, "element type")
      ->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b", "int32", "uint32"}));
  cli.add_option("-w,--warmup_iters", o.warmup, "warm-up iterations")->transform(IntRange(0, 100000));
  cli.add_option("-n,--iters", o.iters, "timed iterations")->transform(IntRange(1, 100000));
  cli.add_option("--topology", topology_name, "ring | linear")->check(parsed_by(parse_topology));
  cli.add_option("--algo", algo, "collective algorithm")
      ->check(CLI::IsMember({"auto", "ring", "bidirectional_ring", "line", "direct"}));
  cli.add_option("--links", o.links, "channels a transfer is striped over")->transform(IntRange(1, ccl::kMaxLinks));
  cli.add_option("--chunk", chunk, "bytes per pipelined message (0: by message size)")
      ->transform(SizeRange(0, int64_t{1} << 30));
  cli.add_option("--json", o.json, "also write one JSON record per row")->type_name("FILE");
  cli.add_option("--mpi-malloc", o.mpi_malloc, "reuse (MPI's per-call temporaries stay faulted in) or default (glibc's own)")
      ->check(CLI::IsMember({"reuse", "default"}));
  parse_command_line(cli, argc, argv);
  if (o.max_bytes < o.min_bytes)
    throw UsageError(fmt::format("--maxbytes: {} is below --minbytes {}", o.max_bytes, o.min_bytes));

  // The checks above let through only what these conversions accept.
  if (which == "all") o.collectives = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"};
  else o.collectives = {which};
  o.dtype = parse_data_type(dtype_name);
  o.topology = parse_topology(topology_name);
  o.ccl.algorithm = ccl::parse_algorithm(algo);
  o.ccl.chunk_bytes = static_cast<size_t>(chunk);
  return o;
}

// What every row is measured with.
struct Bench {
  const BenchOptions& o;
  MeshDevicePtr mesh;  // 1 x n
  int n = 1, rank = 0;
};

void print_header(const Bench& b) {
  const BenchOptions& o = b.o;
  std::printf(
      "# meshnn-ccl-bench: %d ranks, mesh 1x%d, transport %s, dtype %s, topology %s, algo %s, links %d, iters %d, "
      "warmup %d, mpi-malloc %s\n",
      b.n, b.n, std::string(to_string(b.mesh->transport_kind())).c_str(), std::string(to_string(o.dtype)).c_str(),
      std::string(to_string(o.topology)).c_str(), std::string(ccl::to_string(o.ccl.algorithm)).c_str(), o.links,
      o.iters, o.warmup, o.mpi_malloc.c_str());
  std::printf("# ratio = MPI time / our time (our busbw / MPI busbw)\n");
  std::printf("%-15s %12s %12s %10s %9s %9s %7s | %10s %9s | %6s %s\n", "collective", "size(B)", "count", "time(us)",
              "algbw", "busbw", "#wrong", "mpi(us)", "mpi_bus", "ratio", "schedule");
}

// One collective timed beside MPI's on the same data, on this rank.
struct Measured {
  PairTimes times;
  int64_t wrong = 0;     // elements (all_gather: bytes) differing from MPI's result
  std::string schedule;  // the algorithm and chunk size our collective planned
};

std::string schedule_name(const ccl::Schedule& s) {
  return fmt::format("{}/{}K", ccl::to_string(s.algorithm), s.chunk_bytes >> 10);
}

Measured measure_all_gather(const Bench& b, int64_t count) {
  const BenchOptions& o = b.o;
  MPI_Comm comm = b.mesh->comm();
  const int64_t piece = count / b.n;
  const std::vector<float> mine = bench_values(piece, b.rank, o.dtype);
  const Tensor local = make_tensor(mine, o.dtype);
  const Shape global{1, count};
  const MeshTensor in(b.mesh, global, {Replicate{}, Shard{1}}, local);
  MeshTensor out = all_gather(in, 1, std::nullopt, o.topology, o.links, o.ccl);
  MpiBuffer<std::byte> mpi_out(local.size_bytes() * b.n);
  const int bytes = static_cast<int>(local.size_bytes());
  Measured m;
  m.times = time_pair(
      o.warmup, o.iters, comm, [&] { all_gather_into(in, out, 1, std::nullopt, o.topology, o.links, o.ccl); },
      [&] { MPI_Allgather(local.data<std::byte>(), bytes, MPI_BYTE, mpi_out.data(), bytes, MPI_BYTE, comm); });
  m.wrong = bytes_differing(mpi_out, out.local());
  m.schedule = schedule_name(planned_schedule(in, ccl::Collective::ALL_GATHER, std::nullopt, o.topology, o.ccl));
  return m;
}

// Our `count` elements as n rows (n tile rows for block floats), row j for rank j: the blocks lie
// one after another on both sides, as MPI_Alltoall's do. In Shard(1) (columns) -> out Shard(0).
Measured measure_all_to_all(const Bench& b, int64_t count) {
  const BenchOptions& o = b.o;
  MPI_Comm comm = b.mesh->comm();
  const Layout layout = is_block_float(o.dtype) ? Layout::TILE : Layout::ROW_MAJOR;
  const int64_t rows = b.n * (layout == Layout::TILE ? 32 : 1);
  const Shape shape{rows, count / rows};
  const Tensor local = Tensor::from_float(bench_values(count, b.rank, o.dtype), shape, o.dtype, layout);
  const MeshTensor in(b.mesh, Shape{rows, count / rows * b.n}, {Replicate{}, Shard{1}}, local);
  MeshTensor out = all_to_all(in, 1, 0, std::nullopt, o.topology, o.links, o.ccl);
  MpiBuffer<std::byte> mpi_out(local.size_bytes());
  const int block = static_cast<int>(local.size_bytes() / b.n);
  Measured m;
  m.times = time_pair(
      o.warmup, o.iters, comm, [&] { all_to_all_into(in, out, 1, 0, std::nullopt, o.topology, o.links, o.ccl); },
      [&] { MPI_Alltoall(local.data<std::byte>(), block, MPI_BYTE, mpi_out.data(), block, MPI_BYTE, comm); });
  m.wrong = bytes_differing(mpi_out, out.local());
  m.schedule = schedule_name(planned_schedule(in, ccl::Collective::ALL_TO_ALL, std::nullopt, o.topology, o.ccl));
  return m;
}

// reduce_scatter (scatter) or all_reduce.
Measured measure_reduction(const Bench& b, bool scatter, int64_t count) {
  const BenchOptions& o = b.o;
  MPI_Comm comm = b.mesh->comm();
  const bool integer = is_integer(o.dtype);
  const std::vector<float> mine = bench_values(count, b.rank, o.dtype);
  const Tensor local = make_tensor(mine, o.dtype);
  const Shape global{1, count};
  const MeshTensor in(b.mesh, global, {Partial{}, Partial{}}, local);
  MeshTensor out = scatter ? reduce_scatter(in, 1, ReduceOp::SUM, std::nullopt, o.topology, o.links, o.ccl)
                           : all_reduce(in, ReduceOp::SUM, std::nullopt, o.topology, o.links, o.ccl);
  // MPI on the same values: float32, or int32 for the integer dtypes (same bytes per element).
  const size_t out_count = static_cast<size_t>(scatter ? count / b.n : count);
  MpiBuffer<float> mpi_in_f(mine), mpi_out_f(out_count);
  MpiBuffer<int32_t> mpi_in_i(integer ? mine : std::vector<float>{}), mpi_out_i(integer ? out_count : 0);
  void* src = integer ? static_cast<void*>(mpi_in_i.data()) : mpi_in_f.data();
  void* dst = integer ? static_cast<void*>(mpi_out_i.data()) : mpi_out_f.data();
  const MPI_Datatype type = integer ? MPI_INT : MPI_FLOAT;
  Measured m;
  m.times = time_pair(
      o.warmup, o.iters, comm,
      [&] {
        if (scatter) reduce_scatter_into(in, out, 1, ReduceOp::SUM, std::nullopt, o.topology, o.links, o.ccl);
        else all_reduce_into(in, out, ReduceOp::SUM, std::nullopt, o.topology, o.links, o.ccl);
      },
      [&] {
        if (scatter) MPI_Reduce_scatter_block(src, dst, static_cast<int>(count / b.n), type, MPI_SUM, comm);
        else MPI_Allreduce(src, dst, static_cast<int>(count), type, MPI_SUM, comm);
      });
  if (integer)
    for (size_t i = 0; i < out_count; ++i) mpi_out_f.data()[i] = static_cast<float>(mpi_out_i.data()[i]);
  m.wrong = count_wrong(out.local(), mpi_out_f);
  m.schedule = schedule_name(planned_schedule(in, scatter ? ccl::Collective::REDUCE_SCATTER : ccl::Collective::ALL_REDUCE,
                                              std::nullopt, o.topology, o.ccl));
  return m;
}

// One line of the table, the same on every rank.
struct Row {
  std::string collective;
  size_t bytes = 0;  // S
  int64_t count = 0;
  Measured measured;
  int64_t wrong = 0;  // summed over ranks
  double algbw = 0, busbw = 0, mpi_busbw = 0;
};

Row measure_row(const Bench& b, const std::string& collective, int64_t size) {
  const DataType dtype = b.o.dtype;
  // Storage bytes per element (block floats: 1088 bytes per 1024 values).
  const double elem_bytes = dtype == DataType::BFLOAT8_B ? 1088.0 / 1024 : static_cast<double>(std::max<size_t>(1, element_bytes(dtype)));
  // Elements are whole multiples of n (and of a tile row for block floats).
  const int64_t quantum = static_cast<int64_t>(b.n) * (is_block_float(dtype) ? 1024 : 1);
  Row row;
  row.collective = collective;
  row.count = static_cast<int64_t>(size / elem_bytes) / quantum * quantum;  // elements in S
  if (row.count == 0) row.count = quantum;
  row.bytes = static_cast<size_t>(row.count * elem_bytes);
  row.measured = collective == "all_gather"   ? measure_all_gather(b, row.count)
                 : collective == "all_to_all" ? measure_all_to_all(b, row.count)
                                              : measure_reduction(b, collective == "reduce_scatter", row.count);
  MPI_Allreduce(&row.measured.wrong, &row.wrong, 1, MPI_INT64_T, MPI_SUM, b.mesh->comm());
  const double factor_bus = collective == "all_reduce" ? 2.0 * (b.n - 1) / b.n : static_cast<double>(b.n - 1) / b.n;
  const PairTimes& t = row.measured.times;
  row.algbw = row.bytes / t.ours / 1e9;
  row.busbw = row.algbw * factor_bus;
  row.mpi_busbw = row.bytes / t.mpi / 1e9 * factor_bus;
  return row;
}

void print_row(const Row& row) {
  const PairTimes& t = row.measured.times;
  std::printf("%-15s %12zu %12lld %10.2f %9.2f %9.2f %7lld | %10.2f %9.2f | %6.2f %s\n", row.collective.c_str(),
              row.bytes, static_cast<long long>(row.count), t.ours * 1e6, row.algbw, row.busbw,
              static_cast<long long>(row.wrong), t.mpi * 1e6, row.mpi_busbw, t.mpi / t.ours,
              row.measured.schedule.c_str());
}

std::string json_record(const Bench& b, const Row& row) {
  const PairTimes& t = row.measured.times;
  // Figures to the places that the records in docs/measurements/ have always had.
  return nlohmann::ordered_json{{"collective", row.collective},
                                {"topology", to_string(b.o.topology)},
                                {"transport", to_string(b.mesh->transport_kind())},
                                {"dtype", to_string(b.o.dtype)},
                                {"ranks", b.n},
                                {"bytes", row.bytes},
                                {"time_us", io::round_to(t.ours * 1e6, 3)},
                                {"algbw_GBps", io::round_to(row.algbw, 4)},
                                {"busbw_GBps", io::round_to(row.busbw, 4)},
                                {"mpi_busbw_GBps", io::round_to(row.mpi_busbw, 4)},
                                {"ratio", io::round_to(t.mpi / t.ours, 4)},
                                {"wrong", row.wrong}}
      .dump();
}

// Written on rank 0; every rank learns whether it failed.
void write_json_records(const Bench& b, const std::vector<std::string>& records) {
  run_agreed(b.mesh->comm(), "writing the JSON records", [&] {
    if (b.rank == 0) io::write_text_file(b.o.json, io::json_array_lines(records));
  });
}

int bench_main(Runtime& rt, int argc, char** argv) {
  const BenchOptions o = parse_options(argc, argv);
  configure_malloc_for_mpi(o.mpi_malloc);
  const Bench b{o, MeshDevice::open({1, rt.world_size()}, o.topology), rt.world_size(), rt.world_rank()};
  if (b.rank == 0) print_header(b);
  std::vector<std::string> records;  // JSON, one per row
  int64_t all_wrong = 0;
  for (const std::string& collective : o.collectives) {
    for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
      const Row row = measure_row(b, collective, size);
      all_wrong += row.wrong;
      if (b.rank == 0) print_row(row);
      records.push_back(json_record(b, row));
      std::fflush(stdout);
      if (size > o.max_bytes / o.factor) break;
    }
  }
  if (!o.json.empty()) write_json_records(b, records);
  return all_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshnn

int main(int argc, char** argv) { return meshnn::run_app(argc, argv, meshnn::bench_main); }
