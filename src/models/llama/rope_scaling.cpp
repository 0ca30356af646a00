// rope_scaling as Hugging Face's rotary embedding initialisers apply it (linear, dynamic, llama3,
// yarn, longrope).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>

#include "meshnn/core/error.hpp"
#include "meshnn/models/llama/config.hpp"

namespace meshnn::models::llama {
namespace {

using nlohmann::json;

double positive_number(const json& j, const char* key, const std::string& source, std::optional<double> fallback = {}) {
  if (!j.contains(key) || j.at(key).is_null()) {
    MESHNN_CHECK(fallback.has_value(), "{}: rope_scaling {} has no '{}'", source, j.dump(), key);
    return *fallback;
  }
  const json& v = j.at(key);
  MESHNN_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0,
               "{}: rope_scaling '{}' must be a positive number, got {}", source, key, v.dump());
  return v.get<double>();
}

int64_t whole_number(const json& j, const char* key, const std::string& source, std::optional<int64_t> fallback = {}) {
  const double v = positive_number(j, key, source, fallback ? std::optional<double>(static_cast<double>(*fallback))
                                                            : std::nullopt);
  MESHNN_CHECK(v == std::floor(v) && v < 9e15, "{}: rope_scaling {} must be an integer, got {}", source, key, v);
  return static_cast<int64_t>(v);
}

// YaRN's "mscale": how much longer sequences sharpen attention, 0.1 * m * ln(scale) + 1.
double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

// The file's attention_factor, else DeepSeek's ratio when it gives both mscale and mscale_all_dim
// (non-zero), else the paper's 0.1 ln(factor) + 1.
double yarn_attention_factor(const json& j, double factor, const std::string& source) {
  if (j.contains("attention_factor") && !j.at("attention_factor").is_null())
    return positive_number(j, "attention_factor", source);
  auto optional_number = [&](const char* key) {
    if (!j.contains(key) || j.at(key).is_null()) return 0.0;
    MESHNN_CHECK(j.at(key).is_number() && std::isfinite(j.at(key).get<double>()) && j.at(key).get<double>() >= 0,
                 "{}: rope_scaling '{}' must be a number >= 0, got {}", source, key, j.at(key).dump());
    return j.at(key).get<double>();
  };
  const double mscale = optional_number("mscale"), mscale_all_dim = optional_number("mscale_all_dim");
  if (mscale != 0.0 && mscale_all_dim != 0.0) return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim);
  return yarn_mscale(factor, 1.0);
}

// A list of positive numbers (longrope's factors).
std::vector<double> positive_numbers(const json& j, const char* key, const std::string& source) {
  MESHNN_CHECK(j.contains(key) && j.at(key).is_array() && !j.at(key).empty(),
               "{}: rope_scaling {} has no '{}' list", source, j.dump(), key);
  std::vector<double> values;
  for (const json& v : j.at(key)) {
    MESHNN_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0,
                 "{}: rope_scaling '{}' must hold positive numbers, got {}", source, key, v.dump());
    values.push_back(v.get<double>());
  }
  return values;
}

}  // namespace

int64_t RopeScaling::extended_context() const {
  if (type != Type::YARN) return 0;
  return static_cast<int64_t>(std::llround(static_cast<double>(original_max_position_embeddings) * factor));
}

RopeScaling rope_scaling_from_json(const std::string& json_text, int64_t max_position_embeddings,
                                   const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: rope_scaling is not valid JSON ({}): {}", source, e.what(), json_text));
  }
  RopeScaling s;
  if (j.is_null()) return s;
  MESHNN_CHECK(j.is_object(), "{}: rope_scaling must be a JSON object, got {}", source, json_text);
  // Hugging Face reads "rope_type" and, from older configs, "type".
  const json& type = j.contains("rope_type") ? j.at("rope_type") : (j.contains("type") ? j.at("type") : json("default"));
  MESHNN_CHECK(type.is_string(), "{}: rope_scaling's type must be a string, got {}", source, type.dump());
  const std::string name = type.get<std::string>();
  if (name == "default") return s;
  MESHNN_CHECK(name == "linear" || name == "dynamic" || name == "llama3" || name == "yarn" || name == "longrope",
               "{}: rope_scaling type '{}' is not supported (meshnn applies default, linear, dynamic, llama3, yarn "
               "and longrope)",
               source, name);
  if (name == "longrope") {
    // Phi-3's: the ratio of max_position_embeddings to the original context is the factor, when the
    // original is given (meshnn-convert moves Phi-3's top-level original_max_position_embeddings in).
    s.type = RopeScaling::Type::LONGROPE;
    s.short_factor = positive_numbers(j, "short_factor", source);
    s.long_factor = positive_numbers(j, "long_factor", source);
    MESHNN_CHECK(s.short_factor.size() == s.long_factor.size(),
                 "{}: rope_scaling short_factor has {} values and long_factor {}", source, s.short_factor.size(),
                 s.long_factor.size());
    const bool original_given = j.contains("original_max_position_embeddings") &&
                                !j.at("original_max_position_embeddings").is_null();
    s.original_max_position_embeddings =
        whole_number(j, "original_max_position_embeddings", source, max_position_embeddings);
    s.factor = original_given ? static_cast<double>(max_position_embeddings) /
                                    static_cast<double>(s.original_max_position_embeddings)
                              : positive_number(j, "factor", source, 1.0);
    s.attention_factor =
        j.contains("attention_factor") && !j.at("attention_factor").is_null() ? positive_number(j, "attention_factor", source)
        : s.factor <= 1.0 ? 1.0
                          : std::sqrt(1.0 + std::log(s.factor) /
                                                std::log(static_cast<double>(s.original_max_position_embeddings)));
    return s;
  }
  s.factor = positive_number(j, "factor", source);
  MESHNN_CHECK(s.factor >= 1.0, "{}: rope_scaling factor must be >= 1, got {}", source, s.factor);
  if (name == "linear") {
    s.type = RopeScaling::Type::LINEAR;
  } else if (name == "dynamic") {
    // Hugging Face rescales only for sequences longer than the original context; meshnn caps a
    // sequence at max_position_embeddings, so that must be the original context.
    const double original = positive_number(j, "original_max_position_embeddings", source,
                                            static_cast<double>(max_position_embeddings));
    MESHNN_CHECK(original >= static_cast<double>(max_position_embeddings),
                 "{}: rope_scaling dynamic with original_max_position_embeddings {} below max_position_embeddings {} "
                 "would rescale inside the context, which meshnn does not do",
                 source, original, max_position_embeddings);
    s.type = RopeScaling::Type::DYNAMIC;
  } else if (name == "llama3") {
    s.type = RopeScaling::Type::LLAMA3;
    s.low_freq_factor = positive_number(j, "low_freq_factor", source);
    s.high_freq_factor = positive_number(j, "high_freq_factor", source);
    s.original_max_position_embeddings = whole_number(j, "original_max_position_embeddings", source);
    MESHNN_CHECK(s.low_freq_factor < s.high_freq_factor,
                 "{}: rope_scaling low_freq_factor {} must be below high_freq_factor {}", source, s.low_freq_factor,
                 s.high_freq_factor);
  } else {  // yarn
    s.type = RopeScaling::Type::YARN;
    s.original_max_position_embeddings =
        whole_number(j, "original_max_position_embeddings", source, max_position_embeddings);
    s.beta_fast = positive_number(j, "beta_fast", source, 32.0);
    s.beta_slow = positive_number(j, "beta_slow", source, 1.0);
    MESHNN_CHECK(s.beta_slow < s.beta_fast, "{}: rope_scaling beta_slow {} must be below beta_fast {}", source,
                 s.beta_slow, s.beta_fast);
    if (j.contains("truncate") && !j.at("truncate").is_null()) {
      MESHNN_CHECK(j.at("truncate").is_boolean(), "{}: rope_scaling 'truncate' must be true or false, got {}", source,
                   j.at("truncate").dump());
      s.truncate = j.at("truncate").get<bool>();
    }
    s.attention_factor = yarn_attention_factor(j, s.factor, source);
  }
  return s;
}

std::string rope_scaling_to_json(const RopeScaling& s) {
  json j;
  switch (s.type) {
    case RopeScaling::Type::DEFAULT: return json{{"rope_type", "default"}}.dump();
    case RopeScaling::Type::LINEAR: j = {{"rope_type", "linear"}, {"factor", s.factor}}; break;
    case RopeScaling::Type::DYNAMIC: j = {{"rope_type", "dynamic"}, {"factor", s.factor}}; break;
    case RopeScaling::Type::LLAMA3:
      j = {{"rope_type", "llama3"},
           {"factor", s.factor},
           {"low_freq_factor", s.low_freq_factor},
           {"high_freq_factor", s.high_freq_factor},
           {"original_max_position_embeddings", s.original_max_position_embeddings}};
      break;
    case RopeScaling::Type::YARN:
      j = {{"rope_type", "yarn"},
           {"factor", s.factor},
           {"original_max_position_embeddings", s.original_max_position_embeddings},
           {"beta_fast", s.beta_fast},
           {"beta_slow", s.beta_slow},
           {"truncate", s.truncate},
           {"attention_factor", s.attention_factor}};
      break;
    case RopeScaling::Type::LONGROPE:
      j = {{"rope_type", "longrope"},
           {"short_factor", s.short_factor},
           {"long_factor", s.long_factor},
           {"original_max_position_embeddings", s.original_max_position_embeddings},
           {"attention_factor", s.attention_factor}};
      break;
  }
  return j.dump();
}

std::vector<double> rope_inverse_frequencies(const LlamaConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<double> f(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    f[static_cast<size_t>(i)] = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / c.head_dim);
  const RopeScaling& s = c.rope_scaling;
  switch (s.type) {
    case RopeScaling::Type::DEFAULT:
    case RopeScaling::Type::DYNAMIC: break;
    case RopeScaling::Type::LINEAR:
      for (double& x : f) x /= s.factor;
      break;
    case RopeScaling::Type::LLAMA3: {
      const double original = static_cast<double>(s.original_max_position_embeddings);
      const double long_wavelength = original / s.low_freq_factor, short_wavelength = original / s.high_freq_factor;
      for (double& x : f) {
        const double wavelength = 2.0 * std::numbers::pi / x;
        if (wavelength < short_wavelength) continue;
        if (wavelength > long_wavelength) {
          x /= s.factor;
          continue;
        }
        const double smooth = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1.0 - smooth) * x / s.factor + smooth * x;
      }
      break;
    }
    case RopeScaling::Type::YARN: {
      // The pair index at which a frequency turns `rotations` times over the original context
      // (f_i = theta^(-2i / D) solved for i).
      const double dim = static_cast<double>(c.head_dim), original = static_cast<double>(s.original_max_position_embeddings);
      auto index_turning = [&](double rotations) {
        return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(c.rope_theta));
      };
      double low = index_turning(s.beta_fast), high = index_turning(s.beta_slow);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1.0);
      if (low == high) high += 0.001;  // as Hugging Face's ramp: no division by zero
      for (int64_t i = 0; i < half; ++i) {
        // 0: the frequency kept (it turns often enough to extrapolate), 1: divided by factor.
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        double& x = f[static_cast<size_t>(i)];
        x = ramp * x / s.factor + (1.0 - ramp) * x;
      }
      break;
    }
    case RopeScaling::Type::LONGROPE: {
      const std::vector<double>& divisors = s.use_long_factors ? s.long_factor : s.short_factor;
      for (size_t i = 0; i < f.size(); ++i) f[i] /= divisors[i];
      break;
    }
  }
  return f;
}

void select_rope_factors(LlamaConfig& config, int64_t positions) {
  RopeScaling& s = config.rope_scaling;
  if (s.type == RopeScaling::Type::LONGROPE) s.use_long_factors = positions > s.original_max_position_embeddings;
}

}  // namespace meshnn::models::llama
