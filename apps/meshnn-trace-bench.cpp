// meshnn-trace-bench: what one recorded event costs the thread that records it, for the three
// kinds a decode step records (an op with its arguments formatted, as matmul describes itself; a
// plain op or phase; a collective's transfer, numbers only), and what the same hooks cost with
// tracing off. Multiply by a step's events (a trace's event counts) for what tracing adds to the
// step; scripts/trace_overhead.py measures the step itself, on and off.
//
//   build/apps/meshnn-trace-bench [--events 200000]
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "meshnn/core/trace.hpp"
#include "meshnn/runtime/cli.hpp"

using namespace meshnn;

namespace {

template <class Fn>
double ns_per_event(int events, Fn&& record_one) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < events; ++i) record_one(i);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / events;
}

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime&, int argc, char** argv) {
    int events = 200000;
    CLI::App cli("Cost of one recorded trace event, per kind.", "meshnn-trace-bench");
    cli.add_option("--events", events, "events recorded per kind")->transform(IntRange(1000, 100000000));
    parse_command_line(cli, argc, argv);
    auto matmul_hook = [](int i) {
      trace::Scope scope("op", "matmul");
      if (scope.active())
        scope.describe(fmt::format(R"("a":"[1, 1, 32, 2048] bfloat16","b":"[2048, 3072] bfloat8_b","m":{},"k":2048,)"
                                   R"("n":3072,"path":"avx512-bf16")",
                                   32 + i % 2),
                       {.flops = 4e8, .bytes = 7e6});
    };
    auto plain_hook = [](int) { trace::Scope scope("op", "attention_with_kv_cache"); };
    // Off: what every op pays in a run without tracing (the hooks are compiled in always).
    const double op_off = ns_per_event(events, matmul_hook);
    const double plain_off = ns_per_event(events, plain_hook);
    trace::start();
    const double op = ns_per_event(events, matmul_hook);
    const double plain = ns_per_event(events, plain_hook);
    const double transfer = ns_per_event(events, [](int i) {
      const int64_t now = trace::now_ns();
      trace::record_transfer(i % 2 == 0, now, now + 1000, trace::Transfer{1, i % 4, 0, 2048});
    });
    trace::write_and_stop(MPI_COMM_NULL, "");
    std::printf("ns per event, %d of each: op with arguments %.0f, plain op %.0f, transfer %.0f\n", events, op, plain,
                transfer);
    std::printf("ns per hook with tracing off: op with arguments %.1f, plain op %.1f\n", op_off, plain_off);
    return 0;
  });
}
