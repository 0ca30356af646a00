// A decode step after the first reuses what the first one made: no tensor memory allocated, no
// collective plan built, not even a heap allocation (TT-NN captures a trace of the decode step for
// the same reason), in tp and 2d on every mesh shape of the run's size; and so does the generation
// loop around it. Heap allocations of every thread are counted by this binary's operator new.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "meshnn/ccl/plan.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/models/llama/model.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/serving/generator.hpp"
#include "support/test_helpers.hpp"

namespace {
std::atomic<int64_t> g_heap_allocations{0};
}  // namespace

void* operator new(std::size_t bytes) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's temporary buffer uses it): its memory comes back through
// the operator delete below, so both must come from malloc.
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(bytes == 0 ? 1 : bytes);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace meshnn::models::llama {
namespace {

using testing::all_ranks_ok;
using testing::world_rank;
using testing::world_size;

std::string model_file() {
  static std::string file;
  if (!file.empty()) return file;
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  file = fmt::format("{}/meshnn_llama_step_test_{}.h5", ::testing::TempDir(), pid);
  if (world_rank() == 0) {
    SyntheticLlama spec;
    spec.config = llama_preset("tiny");
    spec.seed = 11;
    write_synthetic_llama(file, spec);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return file;
}

struct Counters {
  uint64_t buffers, plans;
  int64_t heap;
};
Counters now() {
  return {buffer_allocations(), ccl::plans_built(), g_heap_allocations.load(std::memory_order_relaxed)};
}

// One decode row per user: the token, its slot, the position it is written at.
serving::TokenBatch decode_batch(int64_t users, int64_t position, int32_t token) {
  serving::TokenBatch b;
  for (int64_t u = 0; u < users; ++u) {
    b.tokens.push_back(static_cast<int32_t>((token + 17 * u) % 250));
    b.slots.push_back(u);
    b.positions.push_back(position + u);
    b.logit_rows.push_back(u);
  }
  return b;
}

TEST(LlamaStep, DecodeStepsAfterTheFirstAllocateNoTensorsAndBuildNoPlans) {
  const std::string file = model_file();
  const LlamaConfig config = config_from_attributes(io::read_root_attributes_local(file), file);
  for (int rows = 1; rows <= world_size(); ++rows) {
    if (world_size() % rows != 0) continue;
    auto mesh = MeshDevice::open({rows, world_size() / rows});
    for (LlamaSharding sharding : {LlamaSharding::TENSOR_PARALLEL, LlamaSharding::TWO_D}) {
      LlamaOptions options{DataType::BFLOAT8_B, DataType::BFLOAT16};
      options.sharding = sharding;
      const LlamaModel model = LlamaModel::load(file, config, mesh, options);
      serving::KvCache cache = model.make_cache(4, 64, DataType::BFLOAT16);
      PhaseTimes times;
      // A ragged prefill of 4 prompts (3, 5, 2 and 7 tokens), logits of each one's last row.
      serving::TokenBatch prefill;
      const int64_t lengths[] = {3, 5, 2, 7};
      for (int64_t u = 0; u < 4; ++u) {
        for (int64_t p = 0; p < lengths[u]; ++p) {
          prefill.tokens.push_back(static_cast<int32_t>((31 * u + 7 * p) % 250));
          prefill.slots.push_back(u);
          prefill.positions.push_back(p);
        }
        prefill.logit_rows.push_back(static_cast<int64_t>(prefill.tokens.size()) - 1);
      }
      // The counters are live: the first pass makes the buffers.
      const Counters start = now();
      model.forward(prefill, cache, times);
      const Counters warm = now();
      EXPECT_TRUE(all_ranks_ok(warm.buffers > start.buffers && warm.heap > start.heap));
      // The first decode step may make its buffers; the next ones, 4 users then 3, must not.
      model.forward(decode_batch(4, 10, 1), cache, times);
      std::vector<serving::TokenBatch> steps;
      for (int64_t s = 1; s <= 6; ++s) steps.push_back(decode_batch(s < 4 ? 4 : 3, 10 + 4 * s, static_cast<int32_t>(s)));
      const Counters before = now();
      for (const serving::TokenBatch& b : steps) model.forward(b, cache, times);
      const Counters after = now();
      const uint64_t buffers = after.buffers - before.buffers, plans = after.plans - before.plans;
      const int64_t heap = after.heap - before.heap;
      EXPECT_TRUE(all_ranks_ok(buffers == 0 && plans == 0 && heap == 0))
          << mesh->shape().to_string() << (sharding == LlamaSharding::TWO_D ? " 2d" : " tp") << ": " << buffers
          << " tensor buffers allocated, " << plans << " plans built and " << heap << " heap allocations in "
          << steps.size() << " decode steps";
    }
  }
}

// The generation loop around the forward pass (sampling on the sharded logits with its exchange,
// the bookkeeping of which requests are active) adds nothing per decode step either: generations
// that differ only in how many tokens they decode allocate the same. Requests end at different
// steps, so the steps' row counts shrink as in a real run.
TEST(LlamaStep, GenerationsDifferingOnlyInLengthAllocateTheSame) {
  const std::string file = model_file();
  const LlamaConfig config = config_from_attributes(io::read_root_attributes_local(file), file);
  auto mesh = MeshDevice::open({1, world_size()});
  const LlamaModel model = LlamaModel::load(file, config, mesh, LlamaOptions{DataType::BFLOAT8_B, DataType::BFLOAT16});
  serving::KvCache cache = model.make_cache(4, 64, DataType::BFLOAT16);
  auto requests_of_length = [](int64_t new_tokens) {
    std::vector<serving::GenerationRequest> requests;
    const int64_t lengths[] = {3, 5, 2, 7};
    for (int64_t u = 0; u < 4; ++u) {
      serving::GenerationRequest r;
      r.id = static_cast<uint64_t>(u);
      for (int64_t p = 0; p < lengths[u]; ++p) r.prompt.push_back(static_cast<int32_t>((31 * u + 7 * p) % 250));
      r.max_new_tokens = new_tokens + u;
      requests.push_back(std::move(r));
    }
    return requests;
  };
  serving::SamplingParams greedy, top_k, top_p;
  top_k.mode = serving::SamplingMode::TOP_K;
  top_k.top_k = 5;
  top_p.mode = serving::SamplingMode::TOP_P;
  top_p.top_k = 0;  // the whole vocabulary: the second exchange (masses) runs too
  for (const serving::SamplingParams& sampling : {greedy, top_k, top_p}) {
    serving::GenerationOptions options;
    options.sampling = sampling;
    auto counted_generation = [&](int64_t new_tokens) {
      const std::vector<serving::GenerationRequest> requests = requests_of_length(new_tokens);
      const Counters before = now();
      const serving::GenerationResult result = serving::generate(model, cache, requests, options);
      const Counters after = now();
      EXPECT_EQ(result.outputs.back().tokens.size(), static_cast<size_t>(new_tokens + 3));
      return Counters{after.buffers - before.buffers, after.plans - before.plans, after.heap - before.heap};
    };
    counted_generation(4);  // what a first generation makes once (the ccl's and kernels' caches)
    const Counters short_run = counted_generation(4), long_run = counted_generation(20);
    EXPECT_TRUE(all_ranks_ok(short_run.buffers == long_run.buffers && short_run.plans == long_run.plans &&
                             short_run.heap == long_run.heap))
        << serving::to_string(sampling.mode) << ": 4 new tokens per request: " << short_run.buffers << " buffers, "
        << short_run.plans << " plans, " << short_run.heap << " heap allocations; 20: " << long_run.buffers << ", "
        << long_run.plans << ", " << long_run.heap;
  }
}

}  // namespace
}  // namespace meshnn::models::llama
