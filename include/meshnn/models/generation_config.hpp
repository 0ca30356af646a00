// The sampling a Hugging Face model asks for by default, from its generation_config.json (which
// meshnn-convert keeps in the weights file's tokenizer/ group): transformers' generate() samples
// with these settings, and vLLM's server takes them as its defaults. meshnn-llm does the same for
// whatever its command line leaves alone (--generation-config none ignores the file).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "meshnn/serving/logit_penalties.hpp"
#include "meshnn/serving/sampler.hpp"

namespace meshnn::models {

// The file's sampling fields, each as given (absent: nullopt).
struct ModelSampling {
  std::optional<bool> do_sample;  // true: sample; false (transformers' default): greedy
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<int64_t> top_k;   // 0: no top-k cut
};

// Reads them from the file's text, with the converter's typed reads of Hugging Face files. Throws
// meshnn::Error naming `where` for text that is not a JSON object, or a field of the wrong type
// (do_sample not a boolean, the others not finite numbers, top_k not an integer). Other fields
// (eos ids, max_length, ...) are not sampling and are ignored.
ModelSampling read_model_sampling(std::string_view json_text, const std::string& where);

// Which sampling settings the command line gave: those stay as given.
struct SamplingGiven {
  bool mode = false, temperature = false, top_k = false, top_p = false, repetition_penalty = false;
};

// Fills the settings not given from the model's, as transformers reads them: do_sample picks top-p
// sampling (its top_p default 1 and top_k default 50 then count as the model's) or greedy; when
// the mode samples, a temperature, top_k or top_p the model gives sets that setting (greedy
// ignores them, as transformers does without do_sample); repetition_penalty applies to greedy
// too. Returns what came
// from the model ("" when nothing did), e.g. "top-p, temperature 0.7, top_k 20, top_p 0.8". Throws
// meshnn::Error naming `where` when the result is not valid sampling (a temperature of 0 with
// do_sample, a top_p out of (0, 1], ...).
std::string apply_model_sampling(const ModelSampling& model, const SamplingGiven& given, const std::string& where,
                                 serving::SamplingParams& sampling, serving::LogitPenalties& penalties);

}  // namespace meshnn::models
