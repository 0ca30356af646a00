#include "meshnn/serving/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>

#include "meshnn/ccl/ccl.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/hash.hpp"
#include "meshnn/tensor/mesh_tensor.hpp"
#include "meshnn/tensor/rows.hpp"

namespace meshnn::serving {
namespace {

// Fixed-point probability mass: 96 fraction bits. A weight q = exp(z - max) <= 1 is at most 2^96,
// so 2^32 tokens fit in 128 bits. Integer sums are associative, which is what lets per-device
// partial masses add up to exactly the single-process mass.
using Mass = unsigned __int128;
constexpr int kMassFractionBits = 96;
constexpr Mass kMassOne = Mass{1} << kMassFractionBits;

// Candidates each device sends for TOP_P without a top-k cut. A nucleus rarely holds more tokens
// than this from one shard; when it does the exact fallback takes over.
constexpr int64_t kTopPCandidates = 256;
constexpr uint32_t kNoToken = 0xFFFFFFFFu;
constexpr int64_t kMaxVocab = std::numeric_limits<int32_t>::max();

// Round-1 buffer: a header per device, then per row C (logit bits, global id) pairs.
constexpr size_t kHeaderWords = 5;  // status, offset lo/hi, valid lo/hi
constexpr size_t kMassWords = 4;

std::atomic<int64_t> g_fallback_rows{0};

struct Candidate {
  double key;  // z: the order, and what the weight is computed from
  int64_t id;  // global token id
  float logit;
};

// The total order every path uses: larger z first, then the lower id.
bool before(const Candidate& a, const Candidate& b) { return a.key > b.key || (a.key == b.key && a.id < b.id); }

double key_of(float logit, const SamplingParams& p) {
  const double x = std::isnan(logit) ? -std::numeric_limits<double>::infinity() : static_cast<double>(logit);
  // A division, not a multiplication by 1 / temperature, so that every path rounds alike.
  return p.mode == SamplingMode::GREEDY ? x : x / p.temperature;
}

// q = exp(z - max) in fixed point. The max itself weighs exactly 1, which also keeps a row of
// all -inf (or a +inf logit) well defined instead of NaN.
Mass weight(double key, double max_key) {
  if (key == max_key) return kMassOne;
  return static_cast<Mass>(std::ldexp(std::exp(key - max_key), kMassFractionBits));
}

double uniform_draw(uint64_t seed, const SampleRow& row) {
  uint64_t h = mix64(seed);
  h = mix64(h ^ row.request_id);
  h = mix64(h ^ static_cast<uint64_t>(row.step));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// The smallest mass the nucleus must reach: ceil(top_p * total), at most total.
Mass nucleus_threshold(Mass total, double top_p) {
  if (top_p >= 1.0) return total;
  const double t = top_p * static_cast<double>(total);
  Mass m = static_cast<Mass>(t);
  if (static_cast<double>(m) < t) ++m;
  return std::min(m, total);
}

// The draw picks the first token whose cumulative mass exceeds this (< mass, so one always does).
Mass draw_threshold(double u, Mass mass) {
  const Mass d = static_cast<Mass>(u * static_cast<double>(mass));
  return std::min(d, mass - 1);
}

// The choice among the kept tokens, given `known`, a prefix of them in order (the max first), and
// the mass of all of them. nullopt when the prefix ends before the choice is certain: the nucleus
// needs more tokens and is not the whole kept mass, or the draw lands past the prefix.
// `cumulative` is scratch (its capacity is kept by the caller).
std::optional<int64_t> choose(std::span<const Candidate> known, Mass kept_mass, double top_p, double u,
                              std::vector<Mass>& cumulative) {
  const double max_key = known.front().key;
  const Mass threshold = nucleus_threshold(kept_mass, top_p);
  cumulative.clear();
  Mass cum = 0;
  std::optional<Mass> nucleus_mass;
  for (const Candidate& c : known) {
    cum += weight(c.key, max_key);
    cumulative.push_back(cum);
    if (cum >= threshold) {
      nucleus_mass = cum;
      break;
    }
  }
  // A nucleus that must reach the whole kept mass has that mass, wherever in the tail it ends.
  if (!nucleus_mass && threshold == kept_mass) nucleus_mass = kept_mass;
  if (!nucleus_mass) return std::nullopt;
  const Mass d = draw_threshold(u, *nucleus_mass);
  for (size_t j = 0; j < cumulative.size(); ++j)
    if (cumulative[j] > d) return known[j].id;
  return std::nullopt;
}

// The `count` best tokens of `row` (valid columns only; ids start at id_base), best first, into
// `heap` (its capacity is kept by the caller). A bounded heap: most columns lose against its worst
// entry at the first comparison.
std::span<const Candidate> best_of(std::span<const float> row, int64_t id_base, int64_t count, const SamplingParams& p,
                                   std::vector<Candidate>& heap) {
  count = std::min<int64_t>(count, static_cast<int64_t>(row.size()));
  heap.clear();
  if (count <= 0) return heap;
  heap.reserve(static_cast<size_t>(count));
  for (size_t j = 0; j < row.size(); ++j) {
    const Candidate c{key_of(row[j], p), id_base + static_cast<int64_t>(j), row[j]};
    if (static_cast<int64_t>(heap.size()) < count) {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), before);  // front = the worst kept so far
    } else if (before(c, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), before);
      heap.back() = c;
      std::push_heap(heap.begin(), heap.end(), before);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), before);  // ascending in `before`: best first
  return heap;
}

// The reference decision for one full row of `vocab` logits.
int64_t choose_full(std::span<const float> row, const SamplingParams& p, double u) {
  std::vector<Candidate> heap;
  std::vector<Mass> cumulative;
  if (p.mode == SamplingMode::GREEDY) return best_of(row, 0, 1, p, heap).front().id;
  const int64_t vocab = static_cast<int64_t>(row.size());
  const double top_p = p.mode == SamplingMode::TOP_P ? p.top_p : 1.0;
  if (p.top_k > 0) {
    const std::span<const Candidate> kept = best_of(row, 0, p.top_k, p, heap);
    Mass mass = 0;
    for (const Candidate& c : kept) mass += weight(c.key, kept.front().key);
    const std::optional<int64_t> id = choose(kept, mass, top_p, u, cumulative);
    MESHNN_FATAL_IF(!id, "sampler: no choice among the {} kept tokens", kept.size());
    return *id;
  }
  // The whole vocabulary is kept: its mass needs every token, the choice usually only the first few.
  double max_key = -std::numeric_limits<double>::infinity();
  for (float x : row) max_key = std::max(max_key, key_of(x, p));
  Mass mass = 0;
  for (float x : row) mass += weight(key_of(x, p), max_key);
  for (int64_t count = std::min(vocab, kTopPCandidates);; count = std::min(vocab, count * 4)) {
    const std::span<const Candidate> known = best_of(row, 0, count, p, heap);
    if (const std::optional<int64_t> id = choose(known, mass, top_p, u, cumulative)) return *id;
    MESHNN_FATAL_IF(count == vocab, "sampler: no choice among all {} tokens", vocab);
  }
}

// Every device's words, concatenated in device-id order, via meshnn's all_gather over the whole
// mesh (Shard(0) on both axes = a row-major split over all devices). Allocates: only the rare
// exact fallback uses it; the exchanges of every call go through a WordExchange.
std::vector<uint32_t> gather_words(const std::vector<uint32_t>& mine, const MeshDevicePtr& mesh) {
  const int n = mesh->num_devices();
  if (n == 1) return mine;
  const int64_t words = static_cast<int64_t>(mine.size());
  MeshTensor local(mesh, Shape{n * words}, {Shard{0}, Shard{0}}, Tensor::from_uint32(mine, Shape{words}, Layout::ROW_MAJOR));
  return all_gather(local, 0).local().to_uint32();
}

// gather_words with buffers kept from call to call: while the block size and the mesh stay the
// same, an exchange allocates nothing (all_gather_into a persistent output).
class WordExchange {
 public:
  // This device's block of `words` words, for the caller to fill before exchange().
  uint32_t* block(const MeshDevicePtr& mesh, size_t words) {
    if (words != words_ || mesh != mesh_) {
      const int64_t w = static_cast<int64_t>(words);
      mine_ = MeshTensor(mesh, Shape{mesh->num_devices() * w}, {Shard{0}, Shard{0}},
                         Tensor(Shape{w}, DataType::UINT32, Layout::ROW_MAJOR));
      all_.reset();
      words_ = words;
      mesh_ = mesh;
    }
    return mine_.local().data<uint32_t>();
  }
  // Every device's block, in device-id order.
  const uint32_t* exchange() {
    if (mesh_->num_devices() == 1) return mine_.local().data<uint32_t>();
    if (all_)
      all_gather_into(mine_, *all_, 0);
    else
      all_ = all_gather(mine_, 0);
    return all_->local().data<uint32_t>();
  }

 private:
  MeshDevicePtr mesh_;
  size_t words_ = 0;
  MeshTensor mine_;
  std::optional<MeshTensor> all_;
};

uint32_t low_word(int64_t v) { return static_cast<uint32_t>(static_cast<uint64_t>(v)); }
uint32_t high_word(int64_t v) { return static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32); }
int64_t from_words(uint32_t lo, uint32_t hi) {
  return static_cast<int64_t>((static_cast<uint64_t>(hi) << 32) | lo);
}

struct DeviceShard {
  bool ok;
  int64_t offset, valid;
};

// Reads the round-1 headers and checks, identically on every rank, that the shards tile
// [0, vocab) in device-id order. Throws the same meshnn::Error everywhere otherwise.
void agree_on_shards(const uint32_t* gathered, size_t block_words, int n, int64_t local_width,
                     std::vector<DeviceShard>& shards) {
  shards.resize(static_cast<size_t>(n));
  std::string bad;
  for (int d = 0; d < n; ++d) {
    const uint32_t* h = gathered + static_cast<size_t>(d) * block_words;
    DeviceShard& s = shards[static_cast<size_t>(d)];
    s = {h[0] == 0, from_words(h[1], h[2]), from_words(h[3], h[4])};
    if (!s.ok)
      bad += fmt::format("{}device {}: offset {}, valid {}", bad.empty() ? "" : "; ", d, s.offset, s.valid);
  }
  MESHNN_CHECK(bad.empty(), "sample_sharded: bad vocabulary shard ({}); needs offset >= 0 and 0 <= valid <= local width {}",
               bad, local_width);
  int64_t next = 0;
  for (int d = 0; d < n; ++d) {
    const DeviceShard& s = shards[static_cast<size_t>(d)];
    MESHNN_CHECK(s.offset == next,
                 "sample_sharded: device {} holds the vocabulary from offset {}, expected {}: the shards must tile "
                 "[0, vocab) in device-id order",
                 d, s.offset, next);
    next = s.offset + s.valid;
  }
  MESHNN_CHECK(next >= 1 && next <= kMaxVocab, "sample_sharded: the shards cover a vocabulary of {}, must be 1..{}", next,
               kMaxVocab);
}

}  // namespace

std::string_view to_string(SamplingMode m) {
  switch (m) {
    case SamplingMode::GREEDY: return "greedy";
    case SamplingMode::TOP_K: return "top-k";
    case SamplingMode::TOP_P: return "top-p";
  }
  return "?";
}

SamplingMode parse_sampling_mode(std::string_view s) {
  std::string name(s);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return c == '_' ? '-' : std::tolower(c); });
  if (name == "greedy") return SamplingMode::GREEDY;
  if (name == "top-k") return SamplingMode::TOP_K;
  if (name == "top-p") return SamplingMode::TOP_P;
  throw Error(fmt::format("unknown sampling mode '{}' (expected greedy, top-k or top-p)", s));
}

// Values no mode accepts are refused in every mode, greedy included: greedy ignores them, but a
// user who typed them meant something, and they would go into the output file's attributes.
void SamplingParams::validate() const {
  MESHNN_CHECK(temperature >= 0 && std::isfinite(temperature), "temperature must be >= 0, got {}", temperature);
  MESHNN_CHECK(top_k >= 0, "top_k must be >= 0, got {}", top_k);
  MESHNN_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1], got {}", top_p);
  if (mode == SamplingMode::GREEDY) return;
  MESHNN_CHECK(temperature > 0, "temperature must be > 0 for {} sampling, got {}", to_string(mode), temperature);
  if (mode == SamplingMode::TOP_K)
    MESHNN_CHECK(top_k >= 1, "top_k must be >= 1 for top-k sampling, got {}", top_k);
}

int64_t exact_fallback_rows() { return g_fallback_rows.load(std::memory_order_relaxed); }

std::vector<int32_t> sample_full(std::span<const float> logits, int64_t vocab, std::span<const SampleRow> rows,
                                 const SamplingParams& params) {
  params.validate();
  MESHNN_CHECK(vocab >= 1 && vocab <= kMaxVocab, "sample_full: vocab must be 1..{}, got {}", kMaxVocab, vocab);
  MESHNN_CHECK(static_cast<int64_t>(logits.size()) == static_cast<int64_t>(rows.size()) * vocab,
               "sample_full: {} logits for {} rows of a vocabulary of {} (expected {})", logits.size(), rows.size(),
               vocab, static_cast<int64_t>(rows.size()) * vocab);
  std::vector<int32_t> out(rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    out[r] = static_cast<int32_t>(
        choose_full(logits.subspan(r * static_cast<size_t>(vocab), static_cast<size_t>(vocab)), params,
                    uniform_draw(params.seed, rows[r])));
  return out;
}

// What a ShardedSampler keeps from call to call. Every vector is cleared or resized within the
// capacity an earlier call left, so a call like an earlier one allocates nothing.
struct ShardedSampler::Buffers {
  std::vector<float> decoded;          // the local logits' rows, when they are not row-major float32
  std::vector<Candidate> heap;         // best_of's
  std::vector<Candidate> merged;       // per row, every device's candidates (stride n * c_max)
  std::vector<size_t> merged_count, known;
  std::vector<Mass> kept_mass, cumulative;
  std::vector<DeviceShard> shards;
  std::vector<int32_t> out;
  std::vector<size_t> fallback;
  WordExchange candidates, masses;
  size_t rows_capacity = 0;  // rows the exchange blocks are sized for (grows, never shrinks)
};

ShardedSampler::ShardedSampler() : buffers_(std::make_unique<Buffers>()) {}
ShardedSampler::~ShardedSampler() = default;
ShardedSampler::ShardedSampler(ShardedSampler&&) noexcept = default;
ShardedSampler& ShardedSampler::operator=(ShardedSampler&&) noexcept = default;

void ShardedSampler::reserve_rows(int64_t rows) {
  buffers_->rows_capacity = std::max(buffers_->rows_capacity, static_cast<size_t>(std::max<int64_t>(rows, 0)));
}

std::span<const int32_t> ShardedSampler::sample(const Tensor& local_logits, const VocabShard& shard,
                                                std::span<const SampleRow> rows, const SamplingParams& params,
                                                const MeshDevicePtr& mesh) {
  Buffers& b = *buffers_;
  // Everything checked here is the same on every rank by construction: all throw alike.
  params.validate();
  const Shape& shape = local_logits.shape();
  MESHNN_CHECK(local_logits.dtype() == DataType::FLOAT32, "sample_sharded: logits must be float32, got {}",
               to_string(local_logits.dtype()));
  MESHNN_CHECK(shape.rank() >= 2 && shape.outer_volume(-2) == 1 && shape[-2] == static_cast<int64_t>(rows.size()),
               "sample_sharded: logits of shape {} for {} rows (expected [..., {}, local_width] with the leading dims "
               "multiplying to 1)",
               shape, rows.size(), rows.size());
  const int64_t width = shape[-1];
  MESHNN_CHECK(width >= 1, "sample_sharded: local_width must be >= 1, got shape {}", shape);
  MESHNN_CHECK(mesh != nullptr && mesh->is_open(), "sample_sharded: the mesh is not open");
  const int n = mesh->num_devices();
  const size_t num_rows = rows.size();
  b.out.clear();
  if (num_rows == 0) return b.out;

  std::span<const float> values;
  if (local_logits.layout() == Layout::ROW_MAJOR) {
    values = {local_logits.data<float>(), static_cast<size_t>(local_logits.volume())};
  } else {
    b.decoded.resize(num_rows * static_cast<size_t>(width));
    for (size_t r = 0; r < num_rows; ++r)
      read_row(local_logits, static_cast<int64_t>(r), b.decoded.data() + r * static_cast<size_t>(width));
    values = b.decoded;
  }
  auto local_row = [&](size_t r) { return values.subspan(r * static_cast<size_t>(width), static_cast<size_t>(width)); };

  // A shard that is wrong on one device only cannot be thrown before the exchange (its peers
  // would wait in the all_gather): it travels as a status, and every rank throws after it.
  const bool shard_ok = shard.offset >= 0 && shard.valid >= 0 && shard.valid <= width;
  const int64_t valid = shard_ok ? shard.valid : 0;

  // Round 1: each device's best C tokens per row. A global top-k lies inside the union of the
  // local top-ks, and the global max is some device's first candidate. The block holds
  // rows_capacity rows, so that it keeps its size (and its buffers) while the row count varies.
  const bool whole_vocab = params.mode == SamplingMode::TOP_P && params.top_k == 0;
  const int64_t wanted = params.mode == SamplingMode::GREEDY ? 1 : whole_vocab ? kTopPCandidates : params.top_k;
  const int64_t c_max = std::min(wanted, width);
  const size_t row_words = static_cast<size_t>(c_max) * 2;
  b.rows_capacity = std::max(b.rows_capacity, num_rows);
  const size_t block_words = kHeaderWords + b.rows_capacity * row_words;
  uint32_t* mine = b.candidates.block(mesh, block_words);
  std::fill_n(mine, block_words, kNoToken);
  mine[0] = shard_ok ? 0 : 1;
  mine[1] = low_word(shard.offset), mine[2] = high_word(shard.offset);
  mine[3] = low_word(shard.valid), mine[4] = high_word(shard.valid);
  for (size_t r = 0; r < num_rows && shard_ok; ++r) {
    const std::span<const Candidate> best =
        best_of(local_row(r).first(static_cast<size_t>(valid)), shard.offset, c_max, params, b.heap);
    uint32_t* out = mine + kHeaderWords + r * row_words;
    for (size_t j = 0; j < best.size(); ++j) {
      out[2 * j] = std::bit_cast<uint32_t>(best[j].logit);
      // Fits: agree_on_shards rejects a vocabulary past int32 on every rank before ids are used.
      out[2 * j + 1] = static_cast<uint32_t>(best[j].id);
    }
  }
  const uint32_t* gathered = b.candidates.exchange();
  agree_on_shards(gathered, block_words, n, width, b.shards);

  // Per row: the merged candidates in global order, and how long a prefix of the global order they
  // are. A device that held tokens back (valid > C) vouches only up to its last candidate.
  const size_t merged_stride = static_cast<size_t>(n) * static_cast<size_t>(c_max);
  b.merged.resize(num_rows * merged_stride);
  b.merged_count.assign(num_rows, 0);
  b.known.assign(num_rows, 0);
  auto merged_row = [&](size_t r) { return std::span<Candidate>(b.merged.data() + r * merged_stride, b.merged_count[r]); };
  for (size_t r = 0; r < num_rows; ++r) {
    Candidate* m = b.merged.data() + r * merged_stride;
    size_t& count = b.merged_count[r];
    std::optional<Candidate> frontier;
    for (int d = 0; d < n; ++d) {
      const uint32_t* in = gathered + static_cast<size_t>(d) * block_words + kHeaderWords + r * row_words;
      for (int64_t j = 0; j < c_max && in[2 * j + 1] != kNoToken; ++j) {
        const float logit = std::bit_cast<float>(in[2 * j]);
        m[count++] = {key_of(logit, params), static_cast<int64_t>(in[2 * j + 1]), logit};
      }
      if (b.shards[static_cast<size_t>(d)].valid > c_max && (!frontier || before(m[count - 1], *frontier)))
        frontier = m[count - 1];
    }
    std::sort(m, m + count, before);
    b.known[r] = frontier ? static_cast<size_t>(std::upper_bound(m, m + count, *frontier, before) - m) : count;
  }

  b.out.resize(num_rows);
  if (params.mode == SamplingMode::GREEDY) {
    for (size_t r = 0; r < num_rows; ++r) b.out[r] = static_cast<int32_t>(merged_row(r).front().id);
    return b.out;
  }

  // The kept set's mass. With a top-k cut it is all in the merged candidates. Without one it
  // spans the whole vocabulary: round 2 adds up every device's mass relative to the global max,
  // which only round 1 could tell.
  b.kept_mass.assign(num_rows, 0);
  if (!whole_vocab) {
    for (size_t r = 0; r < num_rows; ++r) {
      const std::span<const Candidate> m = merged_row(r);
      b.known[r] = std::min(m.size(), static_cast<size_t>(params.top_k));
      for (size_t j = 0; j < b.known[r]; ++j) b.kept_mass[r] += weight(m[j].key, m.front().key);
    }
  } else {
    const size_t mass_words = b.rows_capacity * kMassWords;
    uint32_t* masses = b.masses.block(mesh, mass_words);
    for (size_t r = 0; r < num_rows; ++r) {
      const double max_key = merged_row(r).front().key;
      Mass mass = 0;
      for (float x : local_row(r).first(static_cast<size_t>(valid))) mass += weight(key_of(x, params), max_key);
      for (size_t w = 0; w < kMassWords; ++w) masses[r * kMassWords + w] = static_cast<uint32_t>(mass >> (32 * w));
    }
    const uint32_t* all_masses = b.masses.exchange();
    for (int d = 0; d < n; ++d)
      for (size_t r = 0; r < num_rows; ++r)
        for (size_t w = 0; w < kMassWords; ++w)
          b.kept_mass[r] += Mass{all_masses[static_cast<size_t>(d) * mass_words + r * kMassWords + w]} << (32 * w);
  }

  b.fallback.clear();
  for (size_t r = 0; r < num_rows; ++r) {
    const std::span<const Candidate> prefix = merged_row(r).first(b.known[r]);
    const double top_p = params.mode == SamplingMode::TOP_P ? params.top_p : 1.0;
    if (const std::optional<int64_t> id =
            choose(prefix, b.kept_mass[r], top_p, uniform_draw(params.seed, rows[r]), b.cumulative))
      b.out[r] = static_cast<int32_t>(*id);
    else
      b.fallback.push_back(r);
  }
  MESHNN_FATAL_IF(!whole_vocab && !b.fallback.empty(), "sample_sharded: a top-k row left undecided");
  if (b.fallback.empty()) return b.out;

  // The exact fallback (rare; it allocates): the rows' full local logits (padding included, so
  // every device sends the same size), reassembled from each device's valid columns. Every rank
  // has the same list of rows.
  g_fallback_rows.fetch_add(static_cast<int64_t>(b.fallback.size()), std::memory_order_relaxed);
  std::vector<uint32_t> raw(b.fallback.size() * static_cast<size_t>(width));
  for (size_t f = 0; f < b.fallback.size(); ++f) {
    const std::span<const float> row = local_row(b.fallback[f]);
    std::transform(row.begin(), row.end(), raw.begin() + f * static_cast<size_t>(width),
                   [](float x) { return std::bit_cast<uint32_t>(x); });
  }
  const std::vector<uint32_t> all_raw = gather_words(raw, mesh);
  const int64_t vocab = b.shards.back().offset + b.shards.back().valid;
  std::vector<float> full(static_cast<size_t>(vocab));
  for (size_t f = 0; f < b.fallback.size(); ++f) {
    for (int d = 0; d < n; ++d) {
      const DeviceShard& sh = b.shards[static_cast<size_t>(d)];
      const uint32_t* in = all_raw.data() + (static_cast<size_t>(d) * b.fallback.size() + f) * static_cast<size_t>(width);
      std::transform(in, in + sh.valid, full.begin() + sh.offset, [](uint32_t w) { return std::bit_cast<float>(w); });
    }
    const size_t r = b.fallback[f];
    b.out[r] = static_cast<int32_t>(choose_full(full, params, uniform_draw(params.seed, rows[r])));
  }
  return b.out;
}

std::vector<int32_t> sample_sharded(const Tensor& local_logits, const VocabShard& shard, std::span<const SampleRow> rows,
                                    const SamplingParams& params, const MeshDevicePtr& mesh) {
  ShardedSampler sampler;
  const std::span<const int32_t> ids = sampler.sample(local_logits, shard, rows, params, mesh);
  return {ids.begin(), ids.end()};
}

}  // namespace meshnn::serving
