// meshnn-ccl-bench: nccl-tests-style sweep of meshnn's collectives, with MPI's own collective on
// the same data in the same run.
//
//   mpirun -np 2 meshnn-ccl-bench -b 1M -e 256M -f 2 [-c all] [-d float32] [-w 5] [-n 20]
//          [--topology ring] [--algo auto] [--links 1] [--chunk 0] [--json out.json]
//
// Sizes are nccl-tests' S: all_gather = the gathered output, reduce_scatter = one rank's input,
// all_reduce = the buffer. Time = the slowest rank's mean over -n iterations after -w warm-ups,
// run in rounds that alternate with MPI's (see time_pair);
// algbw = S / time; busbw = algbw * (n-1)/n (gather, scatter) or * 2(n-1)/n (all_reduce).
// ratio = MPI time / our time (= our busbw / MPI busbw; > 1 means faster than MPI).
// #wrong: elements differing from MPI's result (inputs are small integers, so every summation
// order is exact), summed over ranks. For 16-bit and block dtypes MPI gathers the same bytes and
// reduces the same values in float32.
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

// Small integers: exact in every dtype here and in every summation order.
std::vector<float> bench_values(int64_t count, int rank) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 7 + rank * 13) % 31 - 15);
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

int bench_main(Runtime& rt, int argc, char** argv) {
  int64_t min_bytes = int64_t{1} << 20, max_bytes = int64_t{256} << 20, factor = 2, chunk = 0;
  int warmup = 5, iters = 20, links = 1;
  std::string which = "all", dtype_name = "float32", topology_name = "ring", algo = "auto", json, mpi_malloc = "reuse";
  CLI::App cli("nccl-tests-style benchmark of meshnn's collectives against MPI's own", "meshnn-ccl-bench");
  // nccl-tests' short options beside the long ones.
  cli.add_option("-b,--minbytes", min_bytes, "smallest size")->transform(SizeRange(4, int64_t{1} << 40))->default_str("1M");
  cli.add_option("-e,--maxbytes", max_bytes, "largest size")->transform(SizeRange(4, int64_t{1} << 40))->default_str("256M");
  cli.add_option("-f,--stepfactor", factor, "size multiplier between rows")->transform(IntRange(2, 1024));
  cli.add_option("-c,--collective", which, "collectives to run")
      ->check(CLI::IsMember({"all_gather", "reduce_scatter", "all_reduce", "all"}));
  cli.add_option("-d,--dtype", dtype_name, "element type")
      ->check(CLI::IsMember({"float32", "bfloat16", "bfloat8_b", "int32", "uint32"}));
  cli.add_option("-w,--warmup_iters", warmup, "warm-up iterations")->transform(IntRange(0, 100000));
  cli.add_option("-n,--iters", iters, "timed iterations")->transform(IntRange(1, 100000));
  cli.add_option("--topology", topology_name, "ring | linear")->check(parsed_by(parse_topology));
  cli.add_option("--algo", algo, "collective algorithm")
      ->check(CLI::IsMember({"auto", "ring", "bidirectional_ring", "line", "direct"}));
  cli.add_option("--links", links, "channels a transfer is striped over")->transform(IntRange(1, ccl::kMaxLinks));
  cli.add_option("--chunk", chunk, "bytes per pipelined message (0: by message size)")
      ->transform(SizeRange(0, int64_t{1} << 30));
  cli.add_option("--json", json, "also write one JSON record per row")->type_name("FILE");
  cli.add_option("--mpi-malloc", mpi_malloc, "reuse (MPI's per-call temporaries stay faulted in) or default (glibc's own)")
      ->check(CLI::IsMember({"reuse", "default"}));
  parse_command_line(cli, argc, argv);
  if (max_bytes < min_bytes)
    throw UsageError(fmt::format("--maxbytes: {} is below --minbytes {}", max_bytes, min_bytes));

  // The checks above let through only what these conversions accept.
  const DataType dtype = parse_data_type(dtype_name);
  const Topology topology = parse_topology(topology_name);
  CclOptions options;
  options.algorithm = ccl::parse_algorithm(algo);
  options.chunk_bytes = static_cast<size_t>(chunk);
  configure_malloc_for_mpi(mpi_malloc);

  const int n = rt.world_size(), rank = rt.world_rank();
  auto mesh = MeshDevice::open({1, n}, topology);
  MPI_Comm comm = mesh->comm();
  const bool integer = is_integer(dtype);
  // Storage bytes per element (block floats: 1088 bytes per 1024 values).
  const double elem_bytes = dtype == DataType::BFLOAT8_B ? 1088.0 / 1024 : static_cast<double>(std::max<size_t>(1, element_bytes(dtype)));
  // Elements are whole multiples of n (and of a tile row for block floats).
  const int64_t quantum = static_cast<int64_t>(n) * (is_block_float(dtype) ? 1024 : 1);

  std::vector<std::string> collectives;
  if (which == "all") collectives = {"all_gather", "reduce_scatter", "all_reduce"};
  else collectives = {which};

  if (rank == 0) {
    std::printf("# meshnn-ccl-bench: %d ranks, mesh 1x%d, dtype %s, topology %s, algo %s, links %d, iters %d, warmup %d, mpi-malloc %s\n",
                n, n, std::string(to_string(dtype)).c_str(), std::string(to_string(topology)).c_str(),
                std::string(ccl::to_string(options.algorithm)).c_str(), links, iters, warmup, mpi_malloc.c_str());
    std::printf("# ratio = MPI time / our time (our busbw / MPI busbw)\n");
    std::printf("%-15s %12s %12s %10s %9s %9s %7s | %10s %9s | %6s %s\n", "collective", "size(B)", "count", "time(us)",
                "algbw", "busbw", "#wrong", "mpi(us)", "mpi_bus", "ratio", "schedule");
  }
  std::vector<std::string> records;  // JSON, one per row
  int64_t all_wrong = 0;
  for (const std::string& coll : collectives) {
    for (int64_t size = min_bytes; size <= max_bytes; size *= factor) {
      int64_t count = static_cast<int64_t>(size / elem_bytes) / quantum * quantum;  // elements in S
      if (count == 0) count = quantum;
      const size_t bytes = static_cast<size_t>(count * elem_bytes);
      double ours = 0, mpi = 0;
      int64_t wrong = 0;
      std::string schedule;
      if (coll == "all_gather") {
        const int64_t piece = count / n;
        const std::vector<float> mine = bench_values(piece, rank);
        const Tensor local = make_tensor(mine, dtype);
        const Shape global{1, count};
        const MeshTensor in(mesh, global, {Replicate{}, Shard{1}}, local);
        MeshTensor out = all_gather(in, 1, std::nullopt, topology, links, options);
        MpiBuffer<std::byte> mpi_out(local.size_bytes() * n);
        const int b = static_cast<int>(local.size_bytes());
        const PairTimes t = time_pair(
            warmup, iters, comm, [&] { all_gather_into(in, out, 1, std::nullopt, topology, links, options); },
            [&] { MPI_Allgather(local.data<std::byte>(), b, MPI_BYTE, mpi_out.data(), b, MPI_BYTE, comm); });
        ours = t.ours;
        mpi = t.mpi;
        wrong = std::memcmp(mpi_out.data(), out.local().data<std::byte>(), mpi_out.size()) != 0;
        if (wrong) {
          wrong = 0;
          for (size_t i = 0; i < mpi_out.size(); ++i) wrong += mpi_out.data()[i] != out.local().data<std::byte>()[i];
        }
        const auto s = planned_schedule(in, ccl::Collective::ALL_GATHER, std::nullopt, topology, options);
        schedule = fmt::format("{}/{}K", ccl::to_string(s.algorithm), s.chunk_bytes >> 10);
      } else {
        const bool scatter = coll == "reduce_scatter";
        const std::vector<float> mine = bench_values(count, rank);
        const Tensor local = make_tensor(mine, dtype);
        const Shape global{1, count};
        const MeshTensor in(mesh, global, {Partial{}, Partial{}}, local);
        MeshTensor out = scatter ? reduce_scatter(in, 1, ReduceOp::SUM, std::nullopt, topology, links, options)
                                 : all_reduce(in, ReduceOp::SUM, std::nullopt, topology, links, options);
        // MPI on the same values (float32, or the integers themselves).
        // float32 values, or int32 ones for the integer dtypes (same bytes per element).
        const size_t out_count = static_cast<size_t>(scatter ? count / n : count);
        MpiBuffer<float> mpi_in_f(mine), mpi_out_f(out_count);
        MpiBuffer<int32_t> mpi_in_i(integer ? mine : std::vector<float>{}), mpi_out_i(integer ? out_count : 0);
        void* src = integer ? static_cast<void*>(mpi_in_i.data()) : mpi_in_f.data();
        void* dst = integer ? static_cast<void*>(mpi_out_i.data()) : mpi_out_f.data();
        const MPI_Datatype type = integer ? MPI_INT : MPI_FLOAT;
        const PairTimes t = time_pair(
            warmup, iters, comm,
            [&] {
              if (scatter) reduce_scatter_into(in, out, 1, ReduceOp::SUM, std::nullopt, topology, links, options);
              else all_reduce_into(in, out, ReduceOp::SUM, std::nullopt, topology, links, options);
            },
            [&] {
              if (scatter) MPI_Reduce_scatter_block(src, dst, static_cast<int>(count / n), type, MPI_SUM, comm);
              else MPI_Allreduce(src, dst, static_cast<int>(count), type, MPI_SUM, comm);
            });
        ours = t.ours;
        mpi = t.mpi;
        if (integer)
          for (size_t i = 0; i < out_count; ++i) mpi_out_f.data()[i] = static_cast<float>(mpi_out_i.data()[i]);
        wrong = count_wrong(out.local(), mpi_out_f);
        const auto s = planned_schedule(in, scatter ? ccl::Collective::REDUCE_SCATTER : ccl::Collective::ALL_REDUCE,
                                        std::nullopt, topology, options);
        schedule = fmt::format("{}/{}K", ccl::to_string(s.algorithm), s.chunk_bytes >> 10);
      }
      int64_t total_wrong = 0;
      MPI_Allreduce(&wrong, &total_wrong, 1, MPI_INT64_T, MPI_SUM, comm);
      const double factor_bus = coll == "all_reduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
      const double algbw = bytes / ours / 1e9, busbw = algbw * factor_bus, mpi_busbw = bytes / mpi / 1e9 * factor_bus;
      all_wrong += total_wrong;
      if (rank == 0)
        std::printf("%-15s %12zu %12lld %10.2f %9.2f %9.2f %7lld | %10.2f %9.2f | %6.2f %s\n", coll.c_str(), bytes,
                    static_cast<long long>(count), ours * 1e6, algbw, busbw, static_cast<long long>(total_wrong),
                    mpi * 1e6, mpi_busbw, mpi / ours, schedule.c_str());
      // Figures to the places that the records in docs/measurements/ have always had.
      records.push_back(nlohmann::ordered_json{{"collective", coll},
                                               {"topology", to_string(topology)},
                                               {"dtype", to_string(dtype)},
                                               {"ranks", n},
                                               {"bytes", bytes},
                                               {"time_us", io::round_to(ours * 1e6, 3)},
                                               {"algbw_GBps", io::round_to(algbw, 4)},
                                               {"busbw_GBps", io::round_to(busbw, 4)},
                                               {"mpi_busbw_GBps", io::round_to(mpi_busbw, 4)},
                                               {"ratio", io::round_to(mpi / ours, 4)},
                                               {"wrong", total_wrong}}
                            .dump());
      std::fflush(stdout);
      if (size > max_bytes / factor) break;
    }
  }
  if (!json.empty()) {
    std::string message;
    if (rank == 0) {
      try {
        io::write_text_file(json, io::json_array_lines(records));
      } catch (const Error& e) {
        message = e.what();
      }
    }
    agree_on_failure(comm, "writing the JSON records", message.empty(), message);
  }
  return all_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace meshnn

int main(int argc, char** argv) { return meshnn::run_app(argc, argv, meshnn::bench_main); }
