#include "meshnn/serving/logit_penalties.hpp"

#include <algorithm>
#include <cmath>

#include "meshnn/core/error.hpp"

namespace meshnn::serving {

void LogitPenalties::validate() const {
  MESHNN_CHECK(std::isfinite(presence) && presence >= -2 && presence <= 2, "presence_penalty must be in [-2, 2], got {}",
               presence);
  MESHNN_CHECK(std::isfinite(frequency) && frequency >= -2 && frequency <= 2,
               "frequency_penalty must be in [-2, 2], got {}", frequency);
  MESHNN_CHECK(std::isfinite(repetition) && repetition > 0 && repetition <= 100,
               "repetition_penalty must be in (0, 100], got {}", repetition);
  std::vector<int32_t> ids;
  ids.reserve(bias.size());
  for (const auto& [id, value] : bias) {
    MESHNN_CHECK(id >= 0, "logit_bias: token id {} is negative", id);
    MESHNN_CHECK(std::isfinite(value) && value >= -100 && value <= 100,
                 "logit_bias: the bias of token {} must be in [-100, 100], got {}", id, value);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  const auto twice = std::adjacent_find(ids.begin(), ids.end());
  MESHNN_CHECK(twice == ids.end(), "logit_bias: token id {} is given twice", twice == ids.end() ? 0 : *twice);
}

void apply_penalties(std::span<float> row, const VocabShard& shard, const LogitPenalties& penalties,
                     std::span<const int32_t> prompt, std::span<const int32_t> generated) {
  if (!penalties.active()) return;
  MESHNN_CHECK(shard.valid >= 0 && shard.valid <= static_cast<int64_t>(row.size()),
               "apply_penalties: the shard's {} valid columns exceed the row's {}", shard.valid, row.size());
  // Local columns of the tokens that matter here, sorted: each adjustment then touches a column once.
  auto local = [&](int32_t id) { return static_cast<int64_t>(id) - shard.offset; };
  auto held = [&](int64_t c) { return c >= 0 && c < shard.valid; };
  std::vector<int64_t> made;  // generated tokens of this shard, with repeats
  for (int32_t id : generated)
    if (held(local(id))) made.push_back(local(id));
  std::sort(made.begin(), made.end());
  std::vector<int64_t> seen = made;  // prompt and generated tokens of this shard, once each
  if (penalties.repetition != 1)
    for (int32_t id : prompt)
      if (held(local(id))) seen.push_back(local(id));
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());

  // The columns any step changes: biased or seen. Each gets its float64 value once, rounded once.
  std::vector<std::pair<int64_t, double>> adjusted;
  adjusted.reserve(seen.size() + penalties.bias.size());
  for (int64_t c : seen) adjusted.emplace_back(c, 0.0);
  for (const auto& [id, value] : penalties.bias)
    if (held(local(id)) && !std::binary_search(seen.begin(), seen.end(), local(id))) adjusted.emplace_back(local(id), 0.0);
  std::sort(adjusted.begin(), adjusted.end());
  for (auto& [c, x] : adjusted) x = static_cast<double>(row[static_cast<size_t>(c)]);
  auto value_of = [&](int64_t c) -> double& {
    return std::lower_bound(adjusted.begin(), adjusted.end(), std::pair<int64_t, double>{c, -INFINITY})->second;
  };

  for (const auto& [id, value] : penalties.bias)
    if (held(local(id))) value_of(local(id)) += static_cast<double>(value);
  if (penalties.repetition != 1)
    for (int64_t c : seen) {
      double& x = value_of(c);
      x = x > 0 ? x / penalties.repetition : x * penalties.repetition;
    }
  for (size_t i = 0; i < made.size();) {
    size_t end = i;
    while (end < made.size() && made[end] == made[i]) ++end;
    value_of(made[i]) -= penalties.frequency * static_cast<double>(end - i) + penalties.presence;
    i = end;
  }
  for (const auto& [c, x] : adjusted) row[static_cast<size_t>(c)] = static_cast<float>(x);
}

}  // namespace meshnn::serving
