// oneDNN's bfloat16 matmul for meshnn-kernel-bench (see kernel_bench_onednn.hpp).
//
// Threads: Debian's libdnnl is built with the OpenMP runtime (libgomp; DNNL_CPU_THREADING_RUNTIME
// in dnnl_config.h). oneDNN runs its parallel regions from the calling thread with
// omp_get_max_threads() threads, both when it creates a primitive (the brgemm matmul chooses its
// blocking for that count) and when it executes one; omp_set_num_threads(T) on the calling thread
// before each makes it use exactly T. The OpenMP threads are not pinned (libgomp's defaults).
#include "kernel_bench_onednn.hpp"

#include <fmt/format.h>

#include <stdexcept>

#ifdef MESHNN_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#endif

namespace meshnn::bench {

#ifdef MESHNN_HAVE_ONEDNN

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

const char* runtime_name(unsigned runtime) {
  switch (runtime) {
    case DNNL_RUNTIME_SEQ: return "sequential";
    case DNNL_RUNTIME_OMP: return "OpenMP";
    case DNNL_RUNTIME_TBB: return "TBB";
    case DNNL_RUNTIME_THREADPOOL: return "threadpool";
    default: return "other";
  }
}

// The thread count of oneDNN's next primitive creations and executions on this thread.
void set_threads(int threads) {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
  omp_set_num_threads(threads);
#elif DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_SEQ
  if (threads != 1) throw std::runtime_error("this oneDNN is built sequential: it runs 1 thread only");
#else
  throw std::runtime_error(
      "this oneDNN's threading runtime is neither OpenMP nor sequential: the bench cannot set its threads");
#endif
}

}  // namespace

bool onednn_available() { return true; }

std::string onednn_description() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("oneDNN {}.{}.{} ({} runtime), effective ISA {}", v->major, v->minor, v->patch,
                     runtime_name(v->cpu_runtime), isa_name(dnnl::get_effective_cpu_isa()));
}

struct OnednnMatmul::State {
  int threads = 1;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul matmul;
  std::unordered_map<int, dnnl::memory> args;  // src, weights, dst
  std::string impl;
};

OnednnMatmul::OnednnMatmul(int64_t m, int64_t k, int64_t n, const float* a, const float* b, int threads)
    : state_(std::make_unique<State>()) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  State& s = *state_;
  s.threads = threads;
  set_threads(threads);  // the primitive is made for this many threads
  const dnnl::memory::desc src_md({m, k}, dt::bf16, tag::ab), weights_md({k, n}, dt::bf16, tag::any),
      dst_md({m, n}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, weights_md, dst_md), s.engine);
  s.impl = pd.impl_info_str();
  s.matmul = dnnl::matmul(pd);
  // float32 [rows, cols] row-major -> a new memory of layout `to` (rounded to bfloat16 by oneDNN).
  auto converted = [&](const float* values, int64_t rows, int64_t cols, const dnnl::memory::desc& to) {
    dnnl::memory from({{rows, cols}, dt::f32, tag::ab}, s.engine, const_cast<float*>(values));  // only read
    dnnl::memory out(to, s.engine);
    dnnl::reorder(from, out).execute(s.stream, from, out);
    s.stream.wait();
    return out;
  };
  s.args = {{DNNL_ARG_SRC, converted(a, m, k, pd.src_desc())},
            {DNNL_ARG_WEIGHTS, converted(b, k, n, pd.weights_desc())},
            {DNNL_ARG_DST, dnnl::memory(pd.dst_desc(), s.engine)}};
}

void OnednnMatmul::run() {
  set_threads(state_->threads);
  state_->matmul.execute(state_->stream, state_->args);
  state_->stream.wait();
}

#else  // built without oneDNN

bool onednn_available() { return false; }

std::string onednn_description() {
  return "oneDNN not built in (CMake did not find oneapi/dnnl/dnnl.hpp, libdnnl and OpenMP; Debian: libdnnl-dev)";
}

struct OnednnMatmul::State {
  std::string impl;
};

OnednnMatmul::OnednnMatmul(int64_t, int64_t, int64_t, const float*, const float*, int) {
  throw std::logic_error("meshnn-kernel-bench was built without oneDNN");
}

void OnednnMatmul::run() {}

#endif

OnednnMatmul::~OnednnMatmul() = default;

const std::string& OnednnMatmul::impl() const { return state_->impl; }

}  // namespace meshnn::bench
