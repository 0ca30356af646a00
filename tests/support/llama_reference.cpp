#include "support/llama_reference.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>

#include "meshnn/core/error.hpp"
#include "meshnn/io/hdf5_io.hpp"

namespace meshnn::testing {
namespace {

using Vec = std::vector<double>;

struct RefLayer {
  std::vector<float> input_norm, q, k, v, o, post_norm, gate, up, down;
  std::vector<float> q_bias, k_bias, v_bias;  // Qwen2 only; empty otherwise
  std::vector<float> q_norm, k_norm;          // Qwen3 only ([head_dim]); empty otherwise
};

struct RefModel {
  int64_t hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
  double eps = 1e-6;
  std::vector<double> inv_freq;  // head_dim / 2 rotary frequencies after rope_scaling
  double rotary_scale = 1.0;     // what the rotation multiplies by (YaRN's attention factor)
  // longrope: the frequencies of sequences longer than `long_after` positions (inv_freq holds the
  // short factors'); empty for other types.
  std::vector<double> inv_freq_long;
  int64_t long_after = 0;
  int64_t window = 0;            // sliding_window; 0 = the whole context
  bool tied = false;
  bool qkv_bias = false;  // model_type "qwen2": Qwen2Attention's q/k/v Linear layers have biases
  bool qk_norm = false;   // model_type "qwen3": Qwen3Attention's q_norm / k_norm over each head
  std::vector<float> embed, final_norm, lm_head;  // lm_head empty when tied
  std::vector<RefLayer> blocks;
};

// The reference reads the configuration itself rather than through config_from_attributes, so a
// mistake there cannot cancel out against the same mistake here.
std::optional<double> number(const io::Attributes& attrs, const char* name) {
  const auto it = attrs.find(name);
  if (it == attrs.end()) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  throw Error(fmt::format("llama reference: attribute '{}' is not a number", name));
}

int64_t count(const io::Attributes& attrs, const char* name, std::optional<int64_t> fallback, const std::string& file) {
  const std::optional<double> v = number(attrs, name);
  MESHNN_CHECK(v || fallback, "llama reference: '{}' has no attribute '{}'", file, name);
  const int64_t n = v ? static_cast<int64_t>(*v) : *fallback;
  MESHNN_CHECK(n > 0, "llama reference: '{}' has {} = {}", file, name, n);
  return n;
}

// Hugging Face's _compute_yarn_parameters, restated: frequency i turns L f_i / 2pi times over the
// original context L, n times at pair index D ln(L / 2pi n) / (2 ln theta). Pairs below the index
// for beta_fast (floored) keep their frequency, pairs beyond the one for beta_slow (ceiled) have it
// divided by factor, and the share divided grows in a straight line between the two indices.
std::vector<double> yarn_frequencies(std::vector<double> inv_freq, const nlohmann::json& scaling, double theta,
                                     int64_t max_position_embeddings) {
  const double factor = scaling.at("factor").get<double>();
  const double context = scaling.value("original_max_position_embeddings", static_cast<double>(max_position_embeddings));
  const double dim = 2.0 * static_cast<double>(inv_freq.size());
  const auto index_of_turns = [&](double turns) {
    return dim * std::log(context / (2.0 * std::numbers::pi * turns)) / (2.0 * std::log(theta));
  };
  const bool truncate = scaling.value("truncate", true);
  double first = index_of_turns(scaling.value("beta_fast", 32.0)), last = index_of_turns(scaling.value("beta_slow", 1.0));
  if (truncate) first = std::floor(first), last = std::ceil(last);
  first = std::max(0.0, first);
  last = std::min(dim - 1.0, last);
  if (last == first) last += 0.001;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double divided_share = std::min(1.0, std::max(0.0, (static_cast<double>(i) - first) / (last - first)));
    inv_freq[i] = (1.0 - divided_share) * inv_freq[i] + divided_share * inv_freq[i] / factor;
  }
  return inv_freq;
}

// Hugging Face's _compute_longrope_parameters, restated: frequency i divided by factor list[i].
std::vector<double> longrope_frequencies(std::vector<double> inv_freq, const nlohmann::json& list) {
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] /= list.at(i).get<double>();
  return inv_freq;
}

// The number cos and sin are multiplied by: YaRN's attention_factor, given or 0.1 ln(factor) + 1;
// longrope's, given or sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings / original.
double rotary_scale(const nlohmann::json& scaling, int64_t max_position_embeddings) {
  const std::string type = scaling.value("rope_type", scaling.value("type", std::string()));
  if (type == "longrope") {
    if (scaling.contains("attention_factor")) return scaling.at("attention_factor").get<double>();
    const double original = scaling.at("original_max_position_embeddings").get<double>();
    const double s = static_cast<double>(max_position_embeddings) / original;
    return s <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(s) / std::log(original));
  }
  if (type != "yarn") return 1.0;
  if (scaling.contains("attention_factor")) return scaling.at("attention_factor").get<double>();
  const double factor = scaling.at("factor").get<double>();
  return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
}

// Hugging Face's _compute_llama3_parameters / linear scaling, restated: per frequency, the
// llama3 factor is chosen from its wavelength (long: divided, short: kept, between: interpolated
// on original / wavelength).
std::vector<double> scaled_frequencies(std::vector<double> inv_freq, const nlohmann::json& scaling, double theta,
                                       int64_t max_position_embeddings) {
  const std::string type = scaling.value("rope_type", scaling.value("type", std::string("default")));
  if (type == "linear")
    for (double& f : inv_freq) f /= scaling.at("factor").get<double>();
  if (type == "yarn") return yarn_frequencies(std::move(inv_freq), scaling, theta, max_position_embeddings);
  if (type != "llama3") return inv_freq;
  const double factor = scaling.at("factor").get<double>(), low = scaling.at("low_freq_factor").get<double>();
  const double high = scaling.at("high_freq_factor").get<double>();
  const double original = scaling.at("original_max_position_embeddings").get<double>();
  for (double& f : inv_freq) {
    const double wavelength = 2.0 * std::numbers::pi / f;
    double kept_share;  // 1: frequency unchanged, 0: divided by factor
    if (wavelength > original / low) kept_share = 0.0;
    else if (wavelength < original / high) kept_share = 1.0;
    else kept_share = (original / wavelength - low) / (high - low);
    f = kept_share * f + (1.0 - kept_share) * f / factor;
  }
  return inv_freq;
}

std::vector<float> load(const std::string& file, const std::string& key, std::vector<int64_t> shape) {
  io::LoadOptions o;
  o.expected_shape = std::move(shape);
  return io::read_dataset_local(file, key, o);
}

std::shared_ptr<const RefModel> load_model(const std::string& file) {
  const io::Attributes attrs = io::read_root_attributes_local(file);
  auto m = std::make_shared<RefModel>();
  m->hidden = count(attrs, "hidden_size", std::nullopt, file);
  m->intermediate = count(attrs, "intermediate_size", std::nullopt, file);
  m->layers = count(attrs, "num_hidden_layers", std::nullopt, file);
  m->heads = count(attrs, "num_attention_heads", std::nullopt, file);
  m->kv_heads = count(attrs, "num_key_value_heads", m->heads, file);
  m->head_dim = count(attrs, "head_dim", m->hidden / m->heads, file);
  m->vocab = count(attrs, "vocab_size", std::nullopt, file);
  m->eps = number(attrs, "rms_norm_eps").value_or(1e-6);
  const double theta = number(attrs, "rope_theta").value_or(10000.0);
  for (int64_t i = 0; i < m->head_dim / 2; ++i)
    m->inv_freq.push_back(1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(m->head_dim)));
  if (const auto it = attrs.find("rope_scaling"); it != attrs.end()) {
    const nlohmann::json scaling = nlohmann::json::parse(std::get<std::string>(it->second));
    const int64_t max_positions = count(attrs, "max_position_embeddings", 2048, file);
    if (scaling.value("rope_type", scaling.value("type", std::string())) == "longrope") {
      m->inv_freq_long = longrope_frequencies(m->inv_freq, scaling.at("long_factor"));
      m->inv_freq = longrope_frequencies(m->inv_freq, scaling.at("short_factor"));
      m->long_after = scaling.at("original_max_position_embeddings").get<int64_t>();
    } else {
      m->inv_freq = scaled_frequencies(m->inv_freq, scaling, theta, max_positions);
    }
    m->rotary_scale = rotary_scale(scaling, max_positions);
  }
  m->window = static_cast<int64_t>(number(attrs, "sliding_window").value_or(0.0));
  m->tied = number(attrs, "tie_word_embeddings").value_or(0.0) != 0.0;
  if (const auto it = attrs.find("model_type"); it != attrs.end())
    if (const auto* type = std::get_if<std::string>(&it->second)) {
      m->qkv_bias = *type == "qwen2";
      m->qk_norm = *type == "qwen3";
    }
  MESHNN_CHECK(m->heads % m->kv_heads == 0 && m->head_dim % 2 == 0,
               "llama reference: '{}' has {} heads, {} KV heads, head_dim {}", file, m->heads, m->kv_heads, m->head_dim);

  const int64_t h = m->hidden, q_width = m->heads * m->head_dim, kv_width = m->kv_heads * m->head_dim;
  const int64_t inter = m->intermediate;
  m->embed = load(file, "model.embed_tokens.weight", {m->vocab, h});
  for (int64_t i = 0; i < m->layers; ++i) {
    auto key = [i](const char* name) { return fmt::format("model.layers.{}.{}", i, name); };
    RefLayer l;
    l.input_norm = load(file, key("input_layernorm.weight"), {h});
    l.q = load(file, key("self_attn.q_proj.weight"), {q_width, h});
    l.k = load(file, key("self_attn.k_proj.weight"), {kv_width, h});
    l.v = load(file, key("self_attn.v_proj.weight"), {kv_width, h});
    if (m->qkv_bias) {
      l.q_bias = load(file, key("self_attn.q_proj.bias"), {q_width});
      l.k_bias = load(file, key("self_attn.k_proj.bias"), {kv_width});
      l.v_bias = load(file, key("self_attn.v_proj.bias"), {kv_width});
    }
    if (m->qk_norm) {
      l.q_norm = load(file, key("self_attn.q_norm.weight"), {m->head_dim});
      l.k_norm = load(file, key("self_attn.k_norm.weight"), {m->head_dim});
    }
    l.o = load(file, key("self_attn.o_proj.weight"), {h, q_width});
    l.post_norm = load(file, key("post_attention_layernorm.weight"), {h});
    l.gate = load(file, key("mlp.gate_proj.weight"), {inter, h});
    l.up = load(file, key("mlp.up_proj.weight"), {inter, h});
    l.down = load(file, key("mlp.down_proj.weight"), {h, inter});
    m->blocks.push_back(std::move(l));
  }
  m->final_norm = load(file, "model.norm.weight", {h});
  if (!m->tied) m->lm_head = load(file, "lm_head.weight", {m->vocab, h});
  return m;
}

// y = W x + b for a PyTorch Linear weight W [out, in] and bias b (empty: none).
Vec linear(const std::vector<float>& w, const Vec& x, const std::vector<float>& b = {}) {
  const size_t in = x.size(), out = w.size() / in;
  Vec y(out, 0.0);
  for (size_t o = 0; o < out; ++o) {
    double acc = b.empty() ? 0.0 : static_cast<double>(b[o]);
    for (size_t i = 0; i < in; ++i) acc += static_cast<double>(w[o * in + i]) * x[i];
    y[o] = acc;
  }
  return y;
}

Vec rms_norm(const Vec& x, const std::vector<float>& w, double eps) {
  double mean_square = 0.0;
  for (double v : x) mean_square += v * v;
  mean_square /= static_cast<double>(x.size());
  const double inv = 1.0 / std::sqrt(mean_square + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * static_cast<double>(w[i]);
  return y;
}

// Rotate-half RoPE on every head of x (heads * head_dim values) at position pos.
void rope(Vec& x, const std::vector<double>& inv_freq, double scale, int64_t pos) {
  const int64_t half = static_cast<int64_t>(inv_freq.size()), head_dim = 2 * half;
  for (size_t base = 0; base < x.size(); base += static_cast<size_t>(head_dim)) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * inv_freq[static_cast<size_t>(i)];
      const double c = std::cos(angle), s = std::sin(angle);
      double& lo = x[base + static_cast<size_t>(i)];
      double& hi = x[base + static_cast<size_t>(i + half)];
      const double a = lo, b = hi;
      lo = (a * c - b * s) * scale;
      hi = (b * c + a * s) * scale;
    }
  }
}

// Qwen3RMSNorm over each head of x (heads * head_dim values) with the head_dim weights w.
void norm_each_head(Vec& x, const std::vector<float>& w, double eps) {
  const size_t d = w.size();
  for (size_t base = 0; base < x.size(); base += d) {
    const Vec head(x.begin() + static_cast<std::ptrdiff_t>(base), x.begin() + static_cast<std::ptrdiff_t>(base + d));
    const Vec normed = rms_norm(head, w, eps);
    std::copy(normed.begin(), normed.end(), x.begin() + static_cast<std::ptrdiff_t>(base));
  }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

std::vector<Vec> forward(const RefModel& m, std::span<const int32_t> tokens) {
  const size_t n = tokens.size();
  const int64_t hd = m.head_dim, group = m.heads / m.kv_heads;
  // longrope: a sequence longer than the original context runs on the long factors at every
  // position, as Hugging Face's does once it has recomputed its cache at the switch.
  const std::vector<double>& inv_freq =
      !m.inv_freq_long.empty() && static_cast<int64_t>(n) > m.long_after ? m.inv_freq_long : m.inv_freq;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<Vec> x(n);
  for (size_t t = 0; t < n; ++t) {
    MESHNN_CHECK(tokens[t] >= 0 && tokens[t] < m.vocab, "llama reference: token {} at position {} is outside [0, {})",
                 tokens[t], t, m.vocab);
    const size_t row = static_cast<size_t>(tokens[t]) * static_cast<size_t>(m.hidden);
    x[t].assign(m.embed.begin() + static_cast<std::ptrdiff_t>(row),
                m.embed.begin() + static_cast<std::ptrdiff_t>(row + static_cast<size_t>(m.hidden)));
  }
  for (const RefLayer& l : m.blocks) {
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec a = rms_norm(x[t], l.input_norm, m.eps);
      q[t] = linear(l.q, a, l.q_bias);
      k[t] = linear(l.k, a, l.k_bias);
      v[t] = linear(l.v, a, l.v_bias);
      if (m.qk_norm) {
        norm_each_head(q[t], l.q_norm, m.eps);
        norm_each_head(k[t], l.k_norm, m.eps);
      }
      rope(q[t], inv_freq, m.rotary_scale, static_cast<int64_t>(t));
      rope(k[t], inv_freq, m.rotary_scale, static_cast<int64_t>(t));
    }
    for (size_t t = 0; t < n; ++t) {
      Vec attn(static_cast<size_t>(m.heads * hd), 0.0);
      for (int64_t h = 0; h < m.heads; ++h) {
        const size_t qo = static_cast<size_t>(h * hd), ko = static_cast<size_t>((h / group) * hd);
        // Causal; with a sliding window only keys s > t - window (Hugging Face's mask).
        const size_t first = m.window > 0 && t + 1 > static_cast<size_t>(m.window) ? t + 1 - static_cast<size_t>(m.window) : 0;
        Vec scores(t + 1, -INFINITY);
        double top = -INFINITY;
        for (size_t s = first; s <= t; ++s) {
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d) dot += q[t][qo + static_cast<size_t>(d)] * k[s][ko + static_cast<size_t>(d)];
          scores[s] = dot * scale;
          top = std::max(top, scores[s]);
        }
        double total = 0.0;
        for (double& sc : scores) total += (sc = std::exp(sc - top));
        for (size_t s = first; s <= t; ++s)
          for (int64_t d = 0; d < hd; ++d)
            attn[qo + static_cast<size_t>(d)] += scores[s] / total * v[s][ko + static_cast<size_t>(d)];
      }
      const Vec o = linear(l.o, attn);
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += o[i];
      const Vec mid = rms_norm(x[t], l.post_norm, m.eps);
      Vec gated = linear(l.gate, mid);
      const Vec up = linear(l.up, mid);
      for (size_t i = 0; i < gated.size(); ++i) gated[i] = silu(gated[i]) * up[i];
      const Vec down = linear(l.down, gated);
      for (size_t i = 0; i < down.size(); ++i) x[t][i] += down[i];
    }
  }
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t) logits[t] = linear(m.tied ? m.embed : m.lm_head, rms_norm(x[t], m.final_norm, m.eps));
  return logits;
}

// Which version of a file a cached model came from. Files written by io::Hdf5Writer are renamed
// into place, so a rewrite gets a new inode even when size and time stamp come out the same.
struct FileVersion {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = 0;
  int64_t modified_ns = 0;
  bool operator==(const FileVersion&) const = default;
};

std::optional<FileVersion> version_of(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return std::nullopt;
  return FileVersion{st.st_dev, st.st_ino, st.st_size, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
}

std::shared_ptr<const RefModel> cached_model(const std::string& file) {
  static std::mutex mutex;
  static std::map<std::string, std::pair<FileVersion, std::shared_ptr<const RefModel>>> cache;
  const std::optional<FileVersion> version = version_of(file);
  std::lock_guard lock(mutex);
  if (const auto it = cache.find(file); it != cache.end() && version && it->second.first == *version)
    return it->second.second;
  auto model = load_model(file);  // a missing file throws read_*_local's error naming it
  if (version) cache[file] = {*version, model};
  return model;
}

}  // namespace

std::vector<std::vector<double>> llama_reference_logits(const std::string& file, std::span<const int32_t> tokens) {
  MESHNN_CHECK(!tokens.empty(), "llama reference: an empty sequence has no logits");
  return forward(*cached_model(file), tokens);
}

}  // namespace meshnn::testing
