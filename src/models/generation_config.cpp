#include "meshnn/models/generation_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "hf_config.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::models {
namespace {

// transformers' GenerationConfig defaults, which a model that samples gets for what it omits.
constexpr double kTemperature = 1.0, kTopP = 1.0;
constexpr int64_t kTopK = 50;

}  // namespace

ModelSampling read_model_sampling(std::string_view json_text, const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  MESHNN_CHECK(!j.is_discarded(), "'{}' is not valid JSON", where);
  const HfConfigFile file(std::move(j), where);
  return {file.opt_boolean("do_sample"), file.opt_real("temperature"), file.opt_real("top_p"),
          file.opt_real("repetition_penalty"), file.opt_int("top_k")};
}

std::string apply_model_sampling(const ModelSampling& model, const SamplingGiven& given, const std::string& where,
                                 serving::SamplingParams& sampling, serving::LogitPenalties& penalties) {
  std::vector<std::string> taken;
  const bool mode_from_model = !given.mode && model.do_sample.has_value();
  if (mode_from_model) {
    sampling.mode = *model.do_sample ? serving::SamplingMode::TOP_P : serving::SamplingMode::GREEDY;
    taken.emplace_back(serving::to_string(sampling.mode));
  }
  // A sampling model's omitted fields are transformers' defaults; otherwise only what it gives.
  const bool defaults_too = mode_from_model && *model.do_sample;
  // Greedy ignores them, as transformers does when do_sample is false.
  const bool samples = sampling.mode != serving::SamplingMode::GREEDY;
  auto fill = [&](bool was_given, const auto& value, auto fallback, auto& setting, const char* name) {
    if (was_given || !samples || (!value && !defaults_too)) return;
    setting = value ? *value : fallback;
    taken.push_back(fmt::format("{} {}", name, setting));
  };
  fill(given.temperature, model.temperature, kTemperature, sampling.temperature, "temperature");
  fill(given.top_k, model.top_k, kTopK, sampling.top_k, "top_k");
  fill(given.top_p, model.top_p, kTopP, sampling.top_p, "top_p");
  if (!given.repetition_penalty && model.repetition_penalty) {
    penalties.repetition = *model.repetition_penalty;
    taken.push_back(fmt::format("repetition_penalty {}", penalties.repetition));
  }
  try {
    sampling.validate();
    penalties.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {} (--generation-config none ignores the file)", where, e.what()));
  }
  return fmt::format("{}", fmt::join(taken, ", "));
}

}  // namespace meshnn::models
