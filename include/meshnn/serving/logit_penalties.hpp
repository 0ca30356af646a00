// What a request asks to be done to its logits before the sampler sees them: OpenAI's logit_bias,
// presence_penalty and frequency_penalty, and Hugging Face's repetition_penalty (which vLLM's
// server also takes). They steer a model away from repeating itself (small models loop) or
// towards or away from chosen tokens.
//
// The arithmetic, per token j of a row, in float64 and rounded to float once at the end:
//   x = logit[j] + bias[j]                                     (logit_bias; 0 for tokens it omits)
//   if j is in the prompt or among the tokens generated so far:
//     x = x > 0 ? x / repetition : x * repetition              (repetition_penalty)
//   x = x - (frequency * count[j] + presence * (count[j] > 0)) (count[j]: j's occurrences among
//                                                               the tokens generated so far)
// in that order, as vLLM applies them. The sampler then divides by the temperature, cuts to top-k
// and top-p and draws (sampler.hpp); greedy takes the largest adjusted logit. Log-probabilities
// (GenerationRequest::logprobs) stay those of the raw logits: what the model thinks, as vLLM
// reports them by default.
//
// The vocabulary is sharded over the mesh (the LM head is column-parallel), and each device adjusts
// the columns it holds: no communication, and the same adjusted logits as one process would make.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "meshnn/serving/sampler.hpp"

namespace meshnn::serving {

struct LogitPenalties {
  double presence = 0;    // in [-2, 2], OpenAI's range; > 0 discourages any token already generated
  double frequency = 0;   // in [-2, 2]; > 0 discourages a token the more it was generated
  double repetition = 1;  // > 0 and at most 100; > 1 discourages tokens of the prompt and the answer
  // (token id, bias in [-100, 100]) pairs, ids distinct: -100 all but bans a token, 100 all but forces it.
  std::vector<std::pair<int32_t, float>> bias;

  bool active() const { return presence != 0 || frequency != 0 || repetition != 1 || !bias.empty(); }
  // Throws meshnn::Error naming the bad value (a penalty out of range or not finite, a negative or
  // repeated bias id, a bias out of [-100, 100]). Ids beyond the vocabulary are the generator's to
  // check (Generator::check), since only it knows the vocabulary.
  void validate() const;
  bool operator==(const LogitPenalties&) const = default;
};

// Adjusts one row of this device's logit shard in place: row[c] is the logit of global token
// shard.offset + c for c < shard.valid (columns past it are padding and left alone). `prompt` and
// `generated` are the request's tokens so far (ids of other shards are skipped). Allocates.
void apply_penalties(std::span<float> row, const VocabShard& shard, const LogitPenalties& penalties,
                     std::span<const int32_t> prompt, std::span<const int32_t> generated);

}  // namespace meshnn::serving
