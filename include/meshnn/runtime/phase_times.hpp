// Wall-clock seconds a rank spent in compute and in communication, accumulated over a job's
// phases (the jobs' time tables; communication includes waiting for the slowest peer).
#pragma once

#include <chrono>
#include <type_traits>

namespace meshnn {

struct PhaseTimes {
  double compute = 0, communication = 0;
  double matmul = 0;  // the part of compute spent in matmuls (jobs whose targets name it)
  void add(const PhaseTimes& o) {
    compute += o.compute;
    communication += o.communication;
    matmul += o.matmul;
  }
};

// Runs fn and adds its wall time to `seconds`; returns fn's result.
template <class Fn>
auto timed(double& seconds, Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  auto add_elapsed = [&] {
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    add_elapsed();
  } else {
    auto result = fn();
    add_elapsed();
    return result;
  }
}

}  // namespace meshnn
