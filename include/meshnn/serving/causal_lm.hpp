// What the serving machinery needs of a decoder-only language model, whatever the model family:
// one forward pass over a batch of token rows (each a token of a cache slot at a position) that
// fills the KV cache and returns this device's shard of the logits of the rows asked for.
#pragma once

#include <cstdint>
#include <vector>

#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/runtime/phase_times.hpp"
#include "meshnn/serving/kv_cache.hpp"
#include "meshnn/serving/sampler.hpp"

namespace meshnn::serving {

// Row m is token tokens[m] of cache slot slots[m] at position positions[m]. A prefill pass holds
// runs of rows of one slot at consecutive positions (one run per prompt, or per piece of a long
// one); a decode step is one row per active slot. Logits are computed only for rows listed in
// logit_rows (in that order): a prefill needs the last row of each prompt it completes.
struct TokenBatch {
  std::vector<int32_t> tokens;
  std::vector<int64_t> slots, positions;
  std::vector<int64_t> logit_rows;
  void clear() {
    tokens.clear();
    slots.clear();
    positions.clear();
    logit_rows.clear();
  }
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  // Collective over mesh(): every device of it passes the same batch. Returns float32
  // [1, 1, logit_rows.size(), local vocabulary width], this device's vocabulary shard, held by the
  // model until its next forward (a decode step reuses the buffers of the one before: after the
  // first, it allocates no tensor memory). Adds this rank's compute and communication time to
  // `times`. Not reentrant: one caller at a time.
  virtual const Tensor& forward(const TokenBatch& batch, KvCache& cache, PhaseTimes& times) const = 0;
  // A cache for `slots` users of up to `max_seq` positions, shaped for this device's KV heads.
  virtual KvCache make_cache(int64_t slots, int64_t max_seq, DataType dtype) const = 0;
  virtual VocabShard vocab_shard() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_positions() const = 0;
  // The devices the model is split over (its logits are sharded over them in device-id order).
  virtual const MeshDevicePtr& mesh() const = 0;
};

}  // namespace meshnn::serving
