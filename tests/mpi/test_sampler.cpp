// The vocabulary-sharded sampler against the one-process reference: every rank builds the same
// seeded full logits, keeps its torch.chunk shard (the last one shorter, its padding filled with
// 1e30 so that a padding column chosen by mistake would win), and sample_sharded must return
// exactly sample_full's ids. Verdicts are combined over ranks before any assertion.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/serving/sampler.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::serving {
namespace {

using testing::all_ranks_ok;
using testing::error_message_of;
using testing::same_on_all_ranks;
using testing::seeded_values;
using testing::world_rank;
using testing::world_size;

constexpr float kPadding = 1e30f;

std::vector<MeshShape> mesh_shapes() {
  const int n = world_size();
  std::vector<MeshShape> shapes = {{1, n}};
  if (n > 1) shapes.push_back({n, 1});
  if (n == 4) shapes.push_back({2, 2});
  return shapes;
}

std::vector<SampleRow> make_rows(int64_t count, uint64_t request_base, int64_t step_base) {
  std::vector<SampleRow> rows;
  for (int64_t r = 0; r < count; ++r) rows.push_back({request_base + static_cast<uint64_t>(r), step_base + 3 * r});
  return rows;
}

// This device's torch.chunk piece of rows x vocab logits, as [1, rows, chunk] in `layout`.
struct LocalShard {
  Tensor logits;
  VocabShard shard;
};
LocalShard shard_of(const std::vector<float>& full, int64_t rows, int64_t vocab, const MeshDevice& mesh,
                    Layout layout = Layout::ROW_MAJOR) {
  const int64_t n = mesh.num_devices(), chunk = (vocab + n - 1) / n;
  const int64_t offset = std::min(vocab, mesh.device_id() * chunk);
  const int64_t valid = std::min(chunk, vocab - offset);
  std::vector<float> local(static_cast<size_t>(rows * chunk), kPadding);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < valid; ++j) local[r * chunk + j] = full[r * vocab + offset + j];
  return {Tensor::from_float(local, Shape{1, rows, chunk}, DataType::FLOAT32, layout), {offset, valid}};
}

SamplingParams greedy() { return {}; }
SamplingParams top_k(int64_t k, double t, uint64_t seed) { return {SamplingMode::TOP_K, t, k, 1.0, seed}; }
SamplingParams top_p(double p, int64_t k, double t, uint64_t seed) { return {SamplingMode::TOP_P, t, k, p, seed}; }

std::string describe(const SamplingParams& p) {
  return fmt::format("{} T={} k={} p={} seed={}", to_string(p.mode), p.temperature, p.top_k, p.top_p, p.seed);
}

std::vector<SamplingParams> all_params() {
  std::vector<SamplingParams> ps = {greedy()};
  for (uint64_t seed : {0ull, 7ull}) {
    for (double t : {0.5, 2.0}) {
      for (int64_t k : {1, 5, 50}) ps.push_back(top_k(k, t, seed));
      for (double p : {0.1, 0.9, 1.0})
        for (int64_t k : {0, 50}) ps.push_back(top_p(p, k, t, seed));
    }
  }
  return ps;
}

// Distributions of rows x vocab logits, all built identically on every rank.
std::vector<float> spread(int64_t rows, int64_t vocab, uint64_t seed, float scale) {
  std::vector<float> v = seeded_values(rows * vocab, seed);
  for (float& x : v) x *= scale;
  return v;
}
std::vector<float> peaked(int64_t rows, int64_t vocab, uint64_t seed) {
  std::vector<float> v = spread(rows, vocab, seed, 1.0f);
  for (int64_t r = 0; r < rows; ++r) v[r * vocab + (r * 37 + 11) % vocab] = 20.0f;
  return v;
}
// Few distinct values: many ties, broken by the lower id, across shard boundaries.
std::vector<float> tied(int64_t rows, int64_t vocab, uint64_t seed) {
  std::vector<float> v = spread(rows, vocab, seed, 2.0f);
  for (float& x : v) x = std::round(x);
  return v;
}
std::vector<float> flat(int64_t rows, int64_t vocab) { return std::vector<float>(rows * vocab, 0.5f); }
// Masked tokens (-inf) and a NaN, which counts as -inf.
std::vector<float> masked(int64_t rows, int64_t vocab, uint64_t seed) {
  std::vector<float> v = spread(rows, vocab, seed, 4.0f);
  for (int64_t i = 0; i < rows * vocab; i += 3) v[i] = -std::numeric_limits<float>::infinity();
  v[1] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

std::string ids_text(const std::vector<int32_t>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

// sample_sharded == sample_full for every params set; returns this rank's mismatches.
std::string compare_all(const std::vector<float>& full, int64_t rows, int64_t vocab, const MeshDevicePtr& mesh,
                        Layout layout, uint64_t step_base) {
  const LocalShard local = shard_of(full, rows, vocab, *mesh, layout);
  const std::vector<SampleRow> sample_rows = make_rows(rows, 100, static_cast<int64_t>(step_base));
  std::string failures;
  for (const SamplingParams& p : all_params()) {
    const std::vector<int32_t> want = sample_full(full, vocab, sample_rows, p);
    const std::vector<int32_t> got = sample_sharded(local.logits, local.shard, sample_rows, p, mesh);
    if (got != want) failures += fmt::format("\n  {}: got [{}], want [{}]", describe(p), ids_text(got), ids_text(want));
  }
  return failures;
}

TEST(ServingSampler, ShardedEqualsFullOnEveryDistribution) {
  struct Case {
    std::string name;
    std::vector<float> logits;
    int64_t vocab;
  };
  constexpr int64_t kRows = 6;
  const std::vector<Case> cases = {
      {"spread x8 v1000", spread(kRows, 1000, 1, 8.0f), 1000}, {"spread x3 v2003", spread(kRows, 2003, 2, 3.0f), 2003},
      {"peaked v1000", peaked(kRows, 1000, 3), 1000},         {"tied v250", tied(kRows, 250, 4), 250},
      {"tied v2003", tied(kRows, 2003, 5), 2003},             {"flat v2003", flat(kRows, 2003), 2003},
      {"masked v1000", masked(kRows, 1000, 6), 1000},         {"vocab 5", spread(kRows, 5, 7, 4.0f), 5}};
  for (MeshShape ms : mesh_shapes()) {
    auto mesh = MeshDevice::open(ms);
    for (const Case& c : cases) {
      for (Layout layout : {Layout::ROW_MAJOR, Layout::TILE}) {
        for (uint64_t step : {0u, 41u}) {
          const std::string failures = compare_all(c.logits, kRows, c.vocab, mesh, layout, step);
          EXPECT_TRUE(all_ranks_ok(failures.empty()))
              << ms.to_string() << " " << c.name << " " << to_string(layout) << " step " << step << failures;
        }
      }
    }
  }
}

TEST(ServingSampler, FlatNucleusTakesTheExactFallbackOnlyWhenNeeded) {
  constexpr int64_t kRows = 4, kVocab = 2003;  // every shard (1..4 devices) holds more than 256 tokens
  const std::vector<float> full = flat(kRows, kVocab);
  const std::vector<SampleRow> rows = make_rows(kRows, 7, 0);
  for (MeshShape ms : mesh_shapes()) {
    auto mesh = MeshDevice::open(ms);
    const LocalShard local = shard_of(full, kRows, kVocab, *mesh);
    // p = 0.1: 201 equal tokens, all among device 0's 256 candidates.
    int64_t before = exact_fallback_rows();
    const SamplingParams narrow = top_p(0.1, 0, 1.0, 3);
    bool ok = sample_sharded(local.logits, local.shard, rows, narrow, mesh) == sample_full(full, kVocab, rows, narrow);
    ok = ok && exact_fallback_rows() == before;
    // p = 0.9: 1803 tokens, past what any device sent.
    before = exact_fallback_rows();
    const SamplingParams wide = top_p(0.9, 0, 1.0, 3);
    const std::vector<int32_t> got = sample_sharded(local.logits, local.shard, rows, wide, mesh);
    ok = ok && got == sample_full(full, kVocab, rows, wide) && exact_fallback_rows() == before + kRows;
    for (int32_t id : got) ok = ok && id >= 0 && id < static_cast<int32_t>(std::ceil(0.9 * kVocab));
    EXPECT_TRUE(all_ranks_ok(ok)) << ms.to_string() << " fallback rows " << exact_fallback_rows() - before;
    EXPECT_TRUE(same_on_all_ranks(std::to_string(exact_fallback_rows())));
  }
}

TEST(ServingSampler, SameOnEveryRankDeterministicAndSeededPerRequest) {
  constexpr int64_t kRows = 16, kVocab = 1000;
  const std::vector<float> one = spread(1, kVocab, 9, 2.0f);
  std::vector<float> full;
  for (int64_t r = 0; r < kRows; ++r) full.insert(full.end(), one.begin(), one.end());  // the same row 16 times
  auto mesh = MeshDevice::open({1, world_size()});
  const LocalShard local = shard_of(full, kRows, kVocab, *mesh);
  const SamplingParams p = top_p(0.9, 0, 2.0, 5);

  const std::vector<SampleRow> by_request = make_rows(kRows, 1, 0);
  std::vector<SampleRow> by_step(kRows, SampleRow{42, 0});
  for (int64_t r = 0; r < kRows; ++r) by_step[r].step = r;
  const std::vector<int32_t> a = sample_sharded(local.logits, local.shard, by_request, p, mesh);
  const std::vector<int32_t> b = sample_sharded(local.logits, local.shard, by_request, p, mesh);
  const std::vector<int32_t> s = sample_sharded(local.logits, local.shard, by_step, p, mesh);
  EXPECT_TRUE(same_on_all_ranks(ids_text(a))) << ids_text(a);
  EXPECT_TRUE(same_on_all_ranks(ids_text(s))) << ids_text(s);
  EXPECT_EQ(a, b);
  // Identical logits in every row: only the request id (or the step) can make the draws differ.
  EXPECT_TRUE(std::any_of(a.begin(), a.end(), [&](int32_t id) { return id != a[0]; })) << ids_text(a);
  EXPECT_TRUE(std::any_of(s.begin(), s.end(), [&](int32_t id) { return id != s[0]; })) << ids_text(s);
  // A request draws the same token whatever slot it sits in.
  std::vector<SampleRow> reversed(by_request.rbegin(), by_request.rend());
  std::vector<int32_t> r = sample_sharded(local.logits, local.shard, reversed, p, mesh);
  std::reverse(r.begin(), r.end());
  EXPECT_EQ(r, a);
  // A different seed changes some draw.
  SamplingParams other = p;
  other.seed = 6;
  EXPECT_NE(sample_sharded(local.logits, local.shard, by_request, other, mesh), a);
}

TEST(ServingSampler, BadArgumentsThrowTheSameErrorOnEveryRank) {
  constexpr int64_t kRows = 3, kVocab = 250;
  const std::vector<float> full = spread(kRows, kVocab, 11, 4.0f);
  auto mesh = MeshDevice::open({1, world_size()});
  const LocalShard local = shard_of(full, kRows, kVocab, *mesh);
  const std::vector<SampleRow> rows = make_rows(kRows, 1, 0);
  struct Bad {
    std::string needle;
    std::function<void()> call;
  };
  SamplingParams bad_p = top_p(1.5, 0, 1.0, 0), neg_t = top_p(0.9, 0, -1.0, 0), k0 = top_k(0, 1.0, 0);
  SamplingParams neg_k = top_p(0.9, -2, 1.0, 0), nan_p = top_p(std::nan(""), 0, 1.0, 0);
  SamplingParams ok_p = top_p(0.9, 0, 1.0, 0), zero_t = top_p(0.9, 0, 0.0, 0);
  SamplingParams greedy_neg_t, greedy_bad_p;  // greedy ignores these values but still refuses them
  greedy_neg_t.temperature = -1.0;
  greedy_bad_p.top_p = 0.0;
  const std::vector<SampleRow> two_rows(rows.begin(), rows.begin() + 2);
  VocabShard wrong = local.shard;
  if (world_rank() == world_size() - 1) wrong.valid = local.logits.shape()[-1] + 1;  // one rank only
  VocabShard shifted = local.shard;
  if (world_rank() == 0) shifted.offset = 1;
  const std::vector<Bad> cases = {
      {"top_p must be in (0, 1], got 1.5", [&] { sample_sharded(local.logits, local.shard, rows, bad_p, mesh); }},
      {"top_p must be in (0, 1], got nan", [&] { sample_sharded(local.logits, local.shard, rows, nan_p, mesh); }},
      {"temperature must be >= 0, got -1", [&] { sample_sharded(local.logits, local.shard, rows, neg_t, mesh); }},
      {"temperature must be > 0 for top-p sampling, got 0",
       [&] { sample_sharded(local.logits, local.shard, rows, zero_t, mesh); }},
      {"top_k must be >= 1 for top-k sampling, got 0", [&] { sample_sharded(local.logits, local.shard, rows, k0, mesh); }},
      {"top_k must be >= 0, got -2", [&] { sample_sharded(local.logits, local.shard, rows, neg_k, mesh); }},
      {"temperature must be >= 0, got -1", [&] { sample_sharded(local.logits, local.shard, rows, greedy_neg_t, mesh); }},
      {"top_p must be in (0, 1], got 0", [&] { sample_sharded(local.logits, local.shard, rows, greedy_bad_p, mesh); }},
      {"logits of shape [1, 3, ", [&] { sample_sharded(local.logits, local.shard, two_rows, ok_p, mesh); }},
      {"logits must be float32, got bfloat16",
       [&] { sample_sharded(local.logits.typecast(DataType::BFLOAT16), local.shard, rows, ok_p, mesh); }},
      {"bad vocabulary shard (device " + std::to_string(world_size() - 1),
       [&] { sample_sharded(local.logits, wrong, rows, ok_p, mesh); }},
      {"device 0 holds the vocabulary from offset 1, expected 0",
       [&] { sample_sharded(local.logits, shifted, rows, ok_p, mesh); }},
      {"sample_full: 750 logits for 2 rows", [&] { sample_full(full, kVocab, two_rows, ok_p); }},
      {"unknown sampling mode 'beam'", [&] { parse_sampling_mode("beam"); }},
  };
  for (const Bad& c : cases) {
    const std::string message = error_message_of(c.call);
    EXPECT_TRUE(all_ranks_ok(message.find(c.needle) != std::string::npos)) << "want '" << c.needle << "', got '"
                                                                           << message << "'";
    EXPECT_TRUE(same_on_all_ranks(message)) << message;
  }
  // The mesh is still usable after every error.
  EXPECT_TRUE(all_ranks_ok(sample_sharded(local.logits, local.shard, rows, ok_p, mesh) ==
                           sample_full(full, kVocab, rows, ok_p)));
  EXPECT_EQ(parse_sampling_mode("Top_P"), SamplingMode::TOP_P);
  EXPECT_EQ(to_string(SamplingMode::TOP_K), "top-k");
}

// ---------------- the reference by hand ----------------

// Frequency of each id over many requests (one row each).
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& p, int64_t draws = 20000) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  std::vector<float> full;
  for (int64_t i = 0; i < draws; ++i) full.insert(full.end(), logits.begin(), logits.end());
  const std::vector<int32_t> ids = sample_full(full, vocab, make_rows(draws, 1, 0), p);
  std::vector<double> f(static_cast<size_t>(vocab), 0.0);
  for (int32_t id : ids) f[static_cast<size_t>(id)] += 1.0 / static_cast<double>(draws);
  return f;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.015) << "id " << i;
}

TEST(ServingSamplerFull, FourLogitsByHand) {
  // softmax(log [1, 2, 3, 4]) = [0.1, 0.2, 0.3, 0.4]; the probability order is ids 3, 2, 1, 0.
  const std::vector<float> logits = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  const std::vector<SampleRow> one = {{1, 0}};
  EXPECT_EQ(sample_full(logits, 4, one, greedy()), std::vector<int32_t>{3});
  EXPECT_EQ(sample_full(logits, 4, one, top_k(1, 1.0, 0)), std::vector<int32_t>{3});
  // top_p 0.35: {3} alone (0.4 >= 0.35).
  expect_near_all(frequencies(logits, top_p(0.35, 0, 1.0, 0), 200), {0, 0, 0, 1});
  // top_p 0.5: {3, 2} (0.4 < 0.5 <= 0.7), renormalised 4/7, 3/7.
  expect_near_all(frequencies(logits, top_p(0.5, 0, 1.0, 1)), {0, 0, 3.0 / 7, 4.0 / 7});
  // top_p 0.75: {3, 2, 1}: 4/9, 3/9, 2/9.
  expect_near_all(frequencies(logits, top_p(0.75, 0, 1.0, 2)), {0, 2.0 / 9, 3.0 / 9, 4.0 / 9});
  // top_k 2 with top_p 1: {3, 2}; top_k 2 then top_p 0.5: 4/7 < 0.5? no: 0.4/0.7 = 0.571 >= 0.5, {3}.
  expect_near_all(frequencies(logits, top_k(2, 1.0, 3)), {0, 0, 3.0 / 7, 4.0 / 7});
  expect_near_all(frequencies(logits, top_p(0.5, 2, 1.0, 3), 200), {0, 0, 0, 1});
  // Temperature 0.5 squares the odds: [1, 4, 9, 16] / 30; top_p 1 keeps everything.
  expect_near_all(frequencies(logits, top_p(1.0, 0, 0.5, 4)), {1.0 / 30, 4.0 / 30, 9.0 / 30, 16.0 / 30});
  // Temperature 2 flattens them: sqrt of the odds.
  const double s = 1 + std::sqrt(2.0) + std::sqrt(3.0) + 2;
  expect_near_all(frequencies(logits, top_k(4, 2.0, 5)), {1 / s, std::sqrt(2.0) / s, std::sqrt(3.0) / s, 2 / s});
}

TEST(ServingSamplerFull, TiesNanAndInfinity) {
  const std::vector<SampleRow> one = {{1, 0}};
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(sample_full(std::vector<float>{1, 3, 3, 0}, 4, one, greedy()), std::vector<int32_t>{1});
  EXPECT_EQ(sample_full(std::vector<float>{1, 3, 3, 0}, 4, one, top_k(1, 1.0, 0)), std::vector<int32_t>{1});
  EXPECT_EQ(sample_full(std::vector<float>{nan, -inf, 2, 2}, 4, one, greedy()), std::vector<int32_t>{2});
  EXPECT_EQ(sample_full(std::vector<float>{-inf, -inf, -inf}, 3, one, greedy()), std::vector<int32_t>{0});
  EXPECT_EQ(sample_full(std::vector<float>{0, inf, 5}, 3, one, top_p(0.9, 0, 1.0, 0)), std::vector<int32_t>{1});
  // Two equal tokens (each just under half the mass): a 0.4 nucleus is the lower id alone.
  expect_near_all(frequencies({2, 7, 7, 1}, top_p(0.4, 0, 1.0, 0), 200), {0, 1, 0, 0});
  // All -inf is uniform.
  expect_near_all(frequencies({-inf, -inf, -inf, -inf}, top_p(1.0, 0, 1.0, 0)), {0.25, 0.25, 0.25, 0.25});
  // Masked tokens are never drawn.
  expect_near_all(frequencies({0, -inf, 0, nan}, top_k(4, 1.0, 0)), {0.5, 0, 0.5, 0});
}

}  // namespace
}  // namespace meshnn::serving
