// Choosing the next token from logits sharded over the vocabulary (the LM head is column-parallel),
// without gathering them: each device picks its local candidates, one small all_gather over the
// mesh's point-to-point schedule brings every device the same candidate lists, and every device
// makes the same choice. TT-NN gathers the full logits first; this moves a few hundred bytes per
// user instead of vocab * 4.
//
// Modes, applied as Hugging Face's generate() applies them: logits / temperature, then top-k
// (keep the k largest), then top-p (keep the smallest set of the most probable tokens whose
// probability reaches top_p), then one draw. Ties are broken by the lower token id everywhere, so
// the choice is a pure function of the logits, the seed, the request and the step: identical on
// every rank, from run to run, and whatever batch slot the request sits in.
//
// The arithmetic, exactly (sample_full and sample_sharded both follow it, so their ids are equal
// bit for bit, however the vocabulary is split):
//  - z = double(logit) / temperature (greedy: z = logit); a NaN logit counts as -inf. Tokens are
//    ordered by (z desc, id asc), which is the probability order with ties by the lower id.
//  - The kept set: the first top_k tokens in that order (TOP_K; TOP_P with top_k > 0), or the
//    whole valid vocabulary (TOP_P with top_k == 0, as Hugging Face: its top-p softmax is over
//    everything the top-k cut left).
//  - Each kept token weighs q = exp(z - max z) computed in double (1 for the max itself), held as
//    a 128-bit fixed-point number with 96 fraction bits. Masses are sums of q in integers: exact
//    and independent of order, so per-device partial sums add up to the single-process sum.
//    probability = q / (mass of the kept set).
//  - TOP_P: the nucleus is the shortest prefix (at least one token) whose mass reaches
//    top_p * kept mass (rounded up to the fixed-point unit; top_p = 1 means all of it). TOP_K
//    behaves as top_p = 1.
//  - The draw: u = a uniform double in [0, 1) hashed from (seed, request_id, step); the chosen
//    token is the first in the nucleus whose cumulative mass exceeds floor(u * nucleus mass).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/tensor/tensor.hpp"

namespace meshnn::serving {

enum class SamplingMode { GREEDY, TOP_K, TOP_P };
std::string_view to_string(SamplingMode m);           // "greedy", "top-k", "top-p"
SamplingMode parse_sampling_mode(std::string_view s);  // throws meshnn::Error listing the choices

struct SamplingParams {
  SamplingMode mode = SamplingMode::GREEDY;
  double temperature = 1.0;  // finite and >= 0; > 0 for top-k / top-p (greedy ignores it)
  int64_t top_k = 50;        // >= 0; TOP_K: >= 1; TOP_P: 0 = no top-k cut before top-p (greedy ignores it)
  double top_p = 0.9;        // in (0, 1] (only TOP_P uses it)
  uint64_t seed = 0;
  // Throws meshnn::Error naming the bad value ("top_p must be in (0, 1], got 1.5", "temperature
  // must be >= 0, got -1", "temperature must be > 0 for top-p sampling, got 0", top_k < 1 in
  // TOP_K mode). Values outside every mode's range are refused in every mode, greedy included.
  void validate() const;
  bool operator==(const SamplingParams&) const = default;
};

// Where this device's logits sit in the vocabulary: columns [offset, offset + valid) of the
// global vocabulary are the first `valid` columns of the local logits; columns past `valid` are
// padding and never chosen. Over a mesh the shards tile [0, vocab) in device-id order (torch.chunk:
// the last ones may be shorter, or empty).
struct VocabShard {
  int64_t offset = 0;
  int64_t valid = 0;
};

// One row to sample: the request it belongs to and how many tokens that request has generated
// before this one (they seed the draw, so a request draws the same numbers in any slot).
struct SampleRow {
  uint64_t request_id = 0;
  int64_t step = 0;
};

// local_logits: float32 [..., rows, local_width] (any layout; the leading dims multiply to 1;
// rows = rows.size()), this device's vocabulary shard. local_width is the same on every device
// (the padded shard width); shard.valid may differ. Collective over the whole `mesh` (every device
// of it holds one shard, in device-id order, and passes the same rows and params). Returns one
// global token id per row, the same on every device and equal to sample_full on the concatenated
// valid columns.
//
// Communication, per call (none on a 1-device mesh, none for rows.size() == 0):
//  - one all_gather of every device's candidates: per row C (logit, id) pairs of 8 bytes, with
//    C = 1 (greedy), top_k (TOP_K; TOP_P with top_k > 0), or 256 (TOP_P with top_k == 0), capped
//    at local_width; plus a 20-byte header per device;
//  - TOP_P with top_k == 0 only: a second all_gather of each device's mass over all its valid
//    columns (16 bytes per row), which needs the global max from the first;
//  - rarely, an exact fallback: when a row's nucleus or draw reaches past the candidates some
//    device held back (its 256th candidate is inside the nucleus: a nearly flat distribution,
//    or top_p close to 1 with u landing in the tail), the local logits of just those rows are
//    gathered (rows * local_width * 4 bytes per device) and every device decides from the full
//    row. Counted by exact_fallback_rows().
//
// Throws meshnn::Error, before any communication, on every rank alike: bad params, a dtype other
// than float32, a shape that is not [..., rows.size(), local_width] with the leading dims
// multiplying to 1, local_width < 1, a mesh that is not open. A shard that is bad on some device
// only (offset < 0, valid outside [0, local_width], shards that do not tile [0, vocab) in device-id
// order, vocab outside [1, 2^31 - 1]) is reported in the candidate exchange, after which every rank
// throws the same meshnn::Error naming the devices.
std::vector<int32_t> sample_sharded(const Tensor& local_logits, const VocabShard& shard, std::span<const SampleRow> rows,
                                    const SamplingParams& params, const MeshDevicePtr& mesh);

// sample_sharded with its buffers kept from call to call: the generator's sampler. A call allocates
// nothing and builds no collective plan once an earlier call has sampled as many rows (or
// reserve_rows() was given as many) with the same mode and top_k on the same mesh: a decode step
// must not allocate (TT-NN captures a trace of the step for the same reason). Only the exact
// fallback allocates. The exchange is sized for the most rows seen or reserved, so every device of
// the mesh must make the same calls (as sample_sharded requires anyway). The returned ids are valid
// until the next call.
class ShardedSampler {
 public:
  ShardedSampler();
  ~ShardedSampler();
  ShardedSampler(ShardedSampler&&) noexcept;
  ShardedSampler& operator=(ShardedSampler&&) noexcept;

  // Sizes the exchange for `rows` rows from the start (the generator: its decode slots).
  void reserve_rows(int64_t rows);
  std::span<const int32_t> sample(const Tensor& local_logits, const VocabShard& shard, std::span<const SampleRow> rows,
                                  const SamplingParams& params, const MeshDevicePtr& mesh);

 private:
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;
};

// The same choice made from full logits (rows x vocab, row-major) in one process: the reference
// the sharded path is tested against. Throws meshnn::Error for bad params, vocab outside
// [1, 2^31 - 1] or logits.size() != rows.size() * vocab.
std::vector<int32_t> sample_full(std::span<const float> logits, int64_t vocab, std::span<const SampleRow> rows,
                                 const SamplingParams& params);

// Rows this process has sampled through sample_sharded's exact fallback (the full-logits gather)
// since it started. Identical on every rank of a mesh (every rank takes the same decision).
int64_t exact_fallback_rows();

}  // namespace meshnn::serving
