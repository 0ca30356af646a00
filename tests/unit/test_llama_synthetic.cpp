// Synthetic Llama checkpoints, token files and the int32 HDF5 path they use, and sanity checks of
// the float64 reference Llama (tests/support/llama_reference) that can fail if it is wrong.
// Expected shapes and tensor ids are written out here from Hugging Face's layout and the numbering
// documented in synthetic.hpp, not taken from synthetic_llama_tensors, so the manifest is checked too.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/models/llama/config.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "support/llama_reference.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using models::llama::LlamaConfig;
using models::llama::SyntheticLlama;

constexpr uint64_t kSeed = 1234;

std::string temp_file(const std::string& name) { return ::testing::TempDir() + "meshnn_llama_" + name + ".h5"; }

// Writes `config` to a file named after `name`. A name always gets the same content and the writer
// renames atomically, so test processes that ctest runs in parallel may share it.
std::string tiny_file(const std::string& name, const LlamaConfig& config,
                      io::StoredType storage = io::StoredType::FLOAT32, bool chunked = false, int deflate = 0) {
  const std::string file = temp_file(name);
  SyntheticLlama spec;
  spec.config = config;
  spec.storage = storage;
  spec.seed = kSeed;
  spec.chunked = chunked;
  spec.deflate_level = deflate;
  models::llama::write_synthetic_llama(file, spec);
  return file;
}

LlamaConfig tiny() { return models::llama::llama_preset("tiny"); }

// key -> PyTorch shape of every tensor of LlamaForCausalLM, from the config alone.
std::map<std::string, std::vector<int64_t>> expected_shapes(const LlamaConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t im = c.intermediate_size;
  std::map<std::string, std::vector<int64_t>> s{{"model.embed_tokens.weight", {c.vocab_size, h}},
                                                {"model.norm.weight", {h}}};
  if (!c.tie_word_embeddings) s["lm_head.weight"] = {c.vocab_size, h};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s[p + "input_layernorm.weight"] = {h};
    s[p + "self_attn.q_proj.weight"] = {q, h};
    s[p + "self_attn.k_proj.weight"] = {kv, h};
    s[p + "self_attn.v_proj.weight"] = {kv, h};
    s[p + "self_attn.o_proj.weight"] = {h, q};
    s[p + "post_attention_layernorm.weight"] = {h};
    s[p + "mlp.gate_proj.weight"] = {im, h};
    s[p + "mlp.up_proj.weight"] = {im, h};
    s[p + "mlp.down_proj.weight"] = {h, im};
  }
  return s;
}

// Tensor ids as documented in synthetic.hpp.
uint64_t layer_id(int64_t layer, int k) { return 100 + 16 * static_cast<uint64_t>(layer) + static_cast<uint64_t>(k); }
enum : int { kInNorm = 0, kQ, kK, kV, kO, kPostNorm, kGate, kUp, kDown };
constexpr uint64_t kEmbedId = 1, kLmHeadId = 2, kFinalNormId = 3;

double linear_scale(int64_t fan_in) { return std::sqrt(3.0 / static_cast<double>(fan_in)); }

std::vector<float> read_all(const std::string& file, const std::string& key) {
  return io::read_dataset_local(file, key, io::LoadOptions{});
}

TEST(LlamaSynthetic, WritesEveryDatasetWithPyTorchShapes) {
  const LlamaConfig c = tiny();
  const std::string file = tiny_file("tiny_f32", c);
  const auto expected = expected_shapes(c);
  ASSERT_EQ(expected.size(), 21u);  // embed + 2 x 9 + norm + lm_head
  for (const auto& [key, shape] : expected) {
    const io::DatasetInfo info = io::inspect_dataset_local(file, key);
    EXPECT_EQ(info.shape, shape) << key;
    EXPECT_EQ(info.type, io::StoredType::FLOAT32) << key;
  }
  const auto manifest = models::llama::synthetic_llama_tensors(c);
  EXPECT_EQ(manifest.size(), expected.size());
  for (const auto& t : manifest) EXPECT_EQ(expected.count(t.key), 1u) << t.key;
  EXPECT_NE(testing::error_message_of([&] { io::inspect_dataset_local(file, "model.layers.2.input_layernorm.weight"); })
                .find("not found"),
            std::string::npos);
}

TEST(LlamaSynthetic, ValuesAreTheSeededSyntheticValues) {
  const LlamaConfig c = tiny();
  const std::string file = tiny_file("tiny_f32", c);
  struct Case {
    std::string key;
    uint64_t id;
    double scale, offset;
  };
  const std::vector<Case> cases = {
      {"model.embed_tokens.weight", kEmbedId, 1.0, 0.0},
      {"lm_head.weight", kLmHeadId, linear_scale(c.hidden_size), 0.0},
      {"model.norm.weight", kFinalNormId, 0.2, 1.0},
      {"model.layers.0.self_attn.q_proj.weight", layer_id(0, kQ), linear_scale(c.hidden_size), 0.0},
      {"model.layers.1.self_attn.v_proj.weight", layer_id(1, kV), linear_scale(c.hidden_size), 0.0},
      {"model.layers.1.self_attn.o_proj.weight", layer_id(1, kO), linear_scale(c.num_attention_heads * c.head_dim), 0.0},
      {"model.layers.1.post_attention_layernorm.weight", layer_id(1, kPostNorm), 0.2, 1.0},
      {"model.layers.0.mlp.down_proj.weight", layer_id(0, kDown), linear_scale(c.intermediate_size), 0.0},
  };
  for (const Case& k : cases) {
    const std::vector<float> v = read_all(file, k.key);
    for (size_t i : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, v.size() / 2, v.size() - 1})
      EXPECT_EQ(v[i], static_cast<float>(k.offset + io::synthetic_value(kSeed, k.id, static_cast<int64_t>(i), k.scale)))
          << k.key << "[" << i << "]";
  }
  // Norm weights spread over [0.8, 1.2), not all 1.
  const std::vector<float> norm = read_all(file, "model.layers.0.input_layernorm.weight");
  float lo = 2, hi = 0;
  for (float x : norm) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GE(lo, 0.8f);
  EXPECT_LT(hi, 1.2f);
  EXPECT_GT(hi - lo, 0.2f);
}

TEST(LlamaSynthetic, BFloat16ChunkedStorageHoldsTheRoundedValues) {
  const LlamaConfig c = tiny();
  const std::string file = tiny_file("tiny_bf16", c, io::StoredType::BFLOAT16, true, 4);
  const std::string key = "model.layers.1.mlp.gate_proj.weight";
  EXPECT_EQ(io::inspect_dataset_local(file, key).type, io::StoredType::BFLOAT16);
  const std::vector<float> v = read_all(file, key);
  ASSERT_EQ(v.size(), static_cast<size_t>(c.intermediate_size * c.hidden_size));
  for (size_t i = 0; i < v.size(); i += 97) {
    const float exact = io::synthetic_value(kSeed, layer_id(1, kGate), static_cast<int64_t>(i), linear_scale(c.hidden_size));
    EXPECT_EQ(v[i], bfloat16_to_float(float_to_bfloat16(exact))) << i;
  }
}

TEST(LlamaSynthetic, RootAttributesRoundTripThroughTheConfig) {
  LlamaConfig c = tiny();
  c.rope_theta = 250000.0;
  c.rope_scaling = {models::llama::RopeScaling::Type::LLAMA3, 8.0, 1.0, 4.0, 128};
  c.sliding_window = 20;
  const std::string file = tiny_file("tiny_theta_attrs", c);
  const io::Attributes attrs = io::read_root_attributes_local(file);
  const LlamaConfig back = models::llama::config_from_attributes(attrs, file);
  EXPECT_EQ(back.hidden_size, c.hidden_size);
  EXPECT_EQ(back.intermediate_size, c.intermediate_size);
  EXPECT_EQ(back.num_hidden_layers, c.num_hidden_layers);
  EXPECT_EQ(back.num_attention_heads, c.num_attention_heads);
  EXPECT_EQ(back.num_key_value_heads, c.num_key_value_heads);
  EXPECT_EQ(back.head_dim, c.head_dim);
  EXPECT_EQ(back.vocab_size, c.vocab_size);
  EXPECT_EQ(back.max_position_embeddings, c.max_position_embeddings);
  EXPECT_EQ(back.rms_norm_eps, c.rms_norm_eps);
  EXPECT_EQ(back.rope_theta, c.rope_theta);
  EXPECT_EQ(back.rope_scaling.type, c.rope_scaling.type);
  EXPECT_EQ(back.rope_scaling.factor, c.rope_scaling.factor);
  EXPECT_EQ(back.rope_scaling.low_freq_factor, c.rope_scaling.low_freq_factor);
  EXPECT_EQ(back.rope_scaling.high_freq_factor, c.rope_scaling.high_freq_factor);
  EXPECT_EQ(back.rope_scaling.original_max_position_embeddings, c.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(back.sliding_window, c.sliding_window);
  EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings);
  EXPECT_EQ(back.bos_token_id, c.bos_token_id);
  EXPECT_EQ(back.eos_token_id, c.eos_token_id);
  ASSERT_TRUE(attrs.count("meshnn_synthetic_seed"));
  EXPECT_EQ(std::get<int64_t>(attrs.at("meshnn_synthetic_seed")), static_cast<int64_t>(kSeed));
}

// Llama 3.1-8B's rope_scaling against Hugging Face's _compute_llama3_parameters evaluated in float64
// with Python (wavelength bands: under 2048 kept, over 8192 divided by 8, between interpolated).
TEST(LlamaRopeScaling, Llama31FrequenciesMatchHuggingFacesFormula) {
  using models::llama::RopeScaling;
  LlamaConfig c = models::llama::llama_preset("llama3-8b");
  c.rope_scaling = models::llama::rope_scaling_from_json(
      R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
          "rope_type": "llama3"})",
      c.max_position_embeddings, "test");
  ASSERT_EQ(c.rope_scaling.type, RopeScaling::Type::LLAMA3);
  const std::vector<double> f = models::llama::rope_inverse_frequencies(c);
  ASSERT_EQ(f.size(), 64u);
  const std::pair<int, double> expected[] = {{0, 1.0},
                                             {28, 0.003211445994752591},
                                             {29, 0.002166570763503359},
                                             {32, 0.0005248461609929547},
                                             {35, 9.556212353964683e-05},
                                             {36, 7.78465527393245e-05},
                                             {63, 3.068925988914511e-07}};
  for (const auto& [i, want] : expected) EXPECT_NEAR(f[i] / want, 1.0, 1e-12) << "frequency " << i;

  // linear: every frequency divided by the factor; the older "type" key names the type too.
  LlamaConfig linear = c;
  linear.rope_scaling = models::llama::rope_scaling_from_json(R"({"type": "linear", "factor": 2.0})", 8192, "test");
  c.rope_scaling = {};
  const std::vector<double> plain = models::llama::rope_inverse_frequencies(c);
  const std::vector<double> halved = models::llama::rope_inverse_frequencies(linear);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(halved[i], plain[i] / 2.0) << i;
  // dynamic changes nothing within max_position_embeddings.
  LlamaConfig dynamic = c;
  dynamic.rope_scaling = models::llama::rope_scaling_from_json(R"({"rope_type": "dynamic", "factor": 2.0})", 8192, "t");
  EXPECT_EQ(models::llama::rope_inverse_frequencies(dynamic), plain);
}

// Qwen3's YaRN (Qwen3-8B: head_dim 128, rope_theta 1e6; the model card's rope_scaling) against Hugging
// Face's _compute_yarn_parameters evaluated in float64 with Python/numpy: pairs 0-23 kept, 40-63
// divided by 4, a linear ramp between (bounds floor(23.60) and ceil(39.65)), unrounded with
// truncate false.
TEST(LlamaRopeScaling, YarnFrequenciesAndAttentionFactorMatchHuggingFacesFormula) {
  using models::llama::RopeScaling;
  LlamaConfig c = models::llama::llama_preset("qwen3-0.6b");
  ASSERT_EQ(c.head_dim, 128);
  ASSERT_EQ(c.rope_theta, 1e6);
  const char* qwen3_card = R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})";
  c.rope_scaling = models::llama::rope_scaling_from_json(qwen3_card, c.max_position_embeddings, "test");
  ASSERT_EQ(c.rope_scaling.type, RopeScaling::Type::YARN);
  EXPECT_EQ(c.rope_scaling.extended_context(), 131072);
  EXPECT_NEAR(c.rope_scaling.attention_factor, 1.138629436111989, 1e-15);  // 0.1 ln 4 + 1
  const std::vector<double> f = models::llama::rope_inverse_frequencies(c);
  ASSERT_EQ(f.size(), 64u);
  const std::pair<int, double> truncated[] = {{0, 1.0},
                                              {22, 0.008659643233600653},
                                              {23, 0.006978305848598663},
                                              {24, 0.005375321490790102},
                                              {31, 0.0008029597275452302},
                                              {39, 6.490394320837028e-05},
                                              {40, 4.445698525097307e-05},
                                              {63, 3.102344401879299e-07}};
  for (const auto& [i, want] : truncated) EXPECT_NEAR(f[i] / want, 1.0, 1e-12) << "frequency " << i;

  c.rope_scaling = models::llama::rope_scaling_from_json(
      R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "truncate": false})", 40960, "t");
  const std::vector<double> g = models::llama::rope_inverse_frequencies(c);
  const std::pair<int, double> unrounded[] = {{23, 0.006978305848598663},
                                              {24, 0.0055172704751341225},
                                              {31, 0.0008117253745814111},
                                              {39, 6.187806812450695e-05},
                                              {40, 4.445698525097307e-05}};
  for (const auto& [i, want] : unrounded) EXPECT_NEAR(g[i] / want, 1.0, 1e-12) << "frequency " << i;

  // The attention factor: the file's own, else DeepSeek's mscale ratio, else 0.1 ln(factor) + 1;
  // the original context defaults to max_position_embeddings.
  const RopeScaling given = models::llama::rope_scaling_from_json(
      R"({"type": "yarn", "factor": 4.0, "attention_factor": 0.5})", 4096, "t");
  EXPECT_EQ(given.attention_factor, 0.5);
  EXPECT_EQ(given.original_max_position_embeddings, 4096);
  EXPECT_EQ(given.extended_context(), 16384);
  const RopeScaling deepseek = models::llama::rope_scaling_from_json(
      R"({"rope_type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 1.0})", 4096, "t");
  EXPECT_NEAR(deepseek.attention_factor, 0.9210423553163399, 1e-15);
  // Written back and read again, the same scaling (the file keeps what the job ran).
  const RopeScaling back =
      models::llama::rope_scaling_from_json(models::llama::rope_scaling_to_json(deepseek), 1, "round trip");
  EXPECT_EQ(back.type, deepseek.type);
  EXPECT_EQ(back.factor, deepseek.factor);
  EXPECT_EQ(back.original_max_position_embeddings, deepseek.original_max_position_embeddings);
  EXPECT_EQ(back.attention_factor, deepseek.attention_factor);
  EXPECT_EQ(back.truncate, deepseek.truncate);
}

// Phi-3.5-mini's longrope shape (head_dim 96, 48 factors per list, 131072 positions over an original
// 4096) with made-up factors, against Hugging Face's _compute_longrope_parameters evaluated in
// float64 with Python: frequency i over short_factor[i] or long_factor[i], and the attention factor
// sqrt(1 + ln(131072 / 4096) / ln(4096)). select_rope_factors picks the long ones only for jobs whose
// sequences may run past 4096 positions.
TEST(LlamaRopeScaling, LongropeFrequenciesAndAttentionFactorMatchHuggingFacesFormula) {
  using models::llama::RopeScaling;
  LlamaConfig c = tiny();
  c.hidden_size = 96 * 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.head_dim = 96;
  c.max_position_embeddings = 131072;
  nlohmann::json scaling = {{"type", "longrope"}, {"original_max_position_embeddings", 4096}};
  for (int i = 0; i < 48; ++i) {
    scaling["short_factor"].push_back(1.0 + 0.01 * i);
    scaling["long_factor"].push_back(1.0 + 0.5 * i);
  }
  c.rope_scaling = models::llama::rope_scaling_from_json(scaling.dump(), c.max_position_embeddings, "test");
  ASSERT_EQ(c.rope_scaling.type, RopeScaling::Type::LONGROPE);
  EXPECT_NEAR(c.rope_scaling.attention_factor, 1.1902380714238083, 1e-15);
  c.validate("test");
  const std::pair<int, double> short_expected[] = {{0, 1.0}, {10, 0.13343629705655174}, {47, 8.241684752575433e-05}};
  const std::pair<int, double> long_expected[] = {{0, 1.0}, {10, 0.02446332112703449}, {47, 4.94501085154526e-06}};
  models::llama::select_rope_factors(c, 4096);
  EXPECT_FALSE(c.rope_scaling.use_long_factors);
  std::vector<double> f = models::llama::rope_inverse_frequencies(c);
  for (const auto& [i, want] : short_expected) EXPECT_NEAR(f[i] / want, 1.0, 1e-12) << "short " << i;
  models::llama::select_rope_factors(c, 4097);
  EXPECT_TRUE(c.rope_scaling.use_long_factors);
  f = models::llama::rope_inverse_frequencies(c);
  for (const auto& [i, want] : long_expected) EXPECT_NEAR(f[i] / want, 1.0, 1e-12) << "long " << i;
  // Lists that do not fit the heads are an error naming both.
  scaling["short_factor"].erase(0);
  scaling["long_factor"].erase(0);
  c.rope_scaling = models::llama::rope_scaling_from_json(scaling.dump(), c.max_position_embeddings, "test");
  EXPECT_NE(testing::error_message_of([&] { c.validate("model.h5"); }).find("47 factors per list, but head_dim 96"),
            std::string::npos);
}

// Every preset is a valid config, and each keeps what sets its model apart.
TEST(LlamaSynthetic, PresetsAreValidAndKeepTheirModelsTraits) {
  for (const std::string& name : models::llama::llama_preset_names())
    EXPECT_NO_THROW(models::llama::llama_preset(name).validate(name)) << name;
  const LlamaConfig phi3 = models::llama::llama_preset("phi3-mini");
  EXPECT_EQ(phi3.sliding_window, std::optional<int64_t>(2047));
  EXPECT_EQ(phi3.num_key_value_heads, phi3.num_attention_heads);
  EXPECT_EQ(phi3.head_dim, 96);
  EXPECT_TRUE(models::llama::llama_preset("qwen3-0.6b").qk_norm);
  EXPECT_TRUE(models::llama::llama_preset("qwen2.5-0.5b").qkv_bias);
}

// A YaRN rope_scaling stretches the context the model runs to original * factor (Qwen's cards add it
// to config.json and leave max_position_embeddings alone), never shrinks it.
TEST(LlamaRopeScaling, YarnRaisesTheContextToOriginalTimesFactor) {
  LlamaConfig c = tiny();
  c.max_position_embeddings = 40960;
  io::Attributes attrs = models::llama::config_to_attributes(c);
  attrs["rope_scaling"] = std::string(R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
  EXPECT_EQ(models::llama::config_from_attributes(attrs, "t").max_position_embeddings, 131072);
  attrs["rope_scaling"] = std::string(R"({"rope_type": "yarn", "factor": 1.0, "original_max_position_embeddings": 32768})");
  EXPECT_EQ(models::llama::config_from_attributes(attrs, "t").max_position_embeddings, 40960);
}

TEST(LlamaRopeScaling, WhatTheJobCannotApplyIsAClearError) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"rope_type": "su", "factor": 4.0})", "rope_scaling type 'su' is not supported"},
      {R"({"rope_type": "longrope", "long_factor": [1, 2]})", "has no 'short_factor' list"},
      {R"({"rope_type": "longrope", "short_factor": [1, 0], "long_factor": [1, 2]})",
       "'short_factor' must hold positive numbers"},
      {R"({"rope_type": "longrope", "short_factor": [1], "long_factor": [1, 2]})",
       "short_factor has 1 values and long_factor 2"},
      {R"({"rope_type": "yarn", "factor": 4.0, "beta_fast": 1, "beta_slow": 32})", "beta_slow 32 must be below beta_fast 1"},
      {R"({"rope_type": "yarn", "factor": 4.0, "truncate": "no"})", "'truncate' must be true or false"},
      {R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 100.5})", "must be an integer"},
      {R"({"rope_type": "yarn", "factor": 4.0, "attention_factor": -1})", "'attention_factor' must be a positive"},
      {R"({"rope_type": "llama3", "factor": 8.0)", "rope_scaling is not valid JSON"},
      {R"({"rope_type": "linear"})", "has no 'factor'"},
      {R"({"rope_type": "linear", "factor": 0.5})", "factor must be >= 1"},
      {R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1,
           "original_max_position_embeddings": 8192})",
       "low_freq_factor 4 must be below high_freq_factor 1"},
      {R"({"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 4096})",
       "would rescale inside the context"},
      {R"([1, 2])", "must be a JSON object"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message =
        testing::error_message_of([&] { models::llama::rope_scaling_from_json(text, 8192, "model.h5"); });
    EXPECT_NE(message.find(expected), std::string::npos) << text << " -> " << message;
    EXPECT_NE(message.find("model.h5"), std::string::npos) << message;
  }
}

TEST(LlamaSynthetic, TiedEmbeddingsLeaveOutLmHead) {
  LlamaConfig c = tiny();
  c.tie_word_embeddings = true;
  c.num_hidden_layers = 1;
  const std::string file = tiny_file("tiny_tied", c);
  EXPECT_NE(testing::error_message_of([&] { io::inspect_dataset_local(file, "lm_head.weight"); }).find("not found"),
            std::string::npos);
  for (const auto& [key, shape] : expected_shapes(c)) EXPECT_EQ(io::inspect_dataset_local(file, key).shape, shape) << key;
  EXPECT_TRUE(models::llama::config_from_attributes(io::read_root_attributes_local(file), file).tie_word_embeddings);
}

// Qwen2 (qkv_bias): the three biases per layer, with their own seeded values, and model_type
// "qwen2" in the file, which the config reads back as qkv_bias. The qwen2.5-0.5b preset is one.
TEST(LlamaSynthetic, Qwen2BiasesAreWrittenAndTheModelTypeSaysSo) {
  LlamaConfig c = tiny();
  c.qkv_bias = true;
  const std::string file = tiny_file("tiny_qwen2", c);
  const int64_t q_width = c.num_attention_heads * c.head_dim, kv_width = c.num_key_value_heads * c.head_dim;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (const auto& [name, width] : {std::pair{"self_attn.q_proj.bias", q_width}, {"self_attn.k_proj.bias", kv_width},
                                      {"self_attn.v_proj.bias", kv_width}})
      EXPECT_EQ(io::inspect_dataset_local(file, models::llama::layer_key(l, name)).shape, std::vector<int64_t>{width});
  const std::vector<float> k_bias = io::read_dataset_local(file, models::llama::layer_key(1, "self_attn.k_proj.bias"), {});
  for (size_t i = 0; i < k_bias.size(); ++i)
    EXPECT_EQ(k_bias[i], io::synthetic_value(kSeed, layer_id(1, 10), static_cast<int64_t>(i), 1.0)) << i;
  const io::Attributes attrs = io::read_root_attributes_local(file);
  EXPECT_EQ(std::get<std::string>(attrs.at("model_type")), "qwen2");
  EXPECT_TRUE(models::llama::config_from_attributes(attrs, file).qkv_bias);
  EXPECT_FALSE(models::llama::config_from_attributes(io::read_root_attributes_local(tiny_file("tiny_f32", tiny())),
                                                     file).qkv_bias);
  const LlamaConfig preset = models::llama::llama_preset("qwen2.5-0.5b");
  EXPECT_TRUE(preset.qkv_bias && preset.tie_word_embeddings);
  EXPECT_EQ(preset.head_dim, 64);
}

TEST(LlamaSynthetic, Qwen3HeadNormsAreWrittenAndTheModelTypeSaysSo) {
  LlamaConfig c = tiny();
  c.qk_norm = true;
  c.head_dim = 20;  // not hidden / heads, as in Qwen3's configs
  const std::string file = tiny_file("tiny_qwen3", c);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const char* name : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"})
      EXPECT_EQ(io::inspect_dataset_local(file, models::llama::layer_key(l, name)).shape, std::vector<int64_t>{20});
    EXPECT_EQ(io::inspect_dataset_local(file, models::llama::layer_key(l, "self_attn.q_proj.weight")).shape,
              (std::vector<int64_t>{8 * 20, c.hidden_size}));
  }
  const io::Attributes attrs = io::read_root_attributes_local(file);
  EXPECT_EQ(std::get<std::string>(attrs.at("model_type")), "qwen3");
  const LlamaConfig back = models::llama::config_from_attributes(attrs, file);
  EXPECT_TRUE(back.qk_norm && !back.qkv_bias);
  EXPECT_EQ(back.head_dim, 20);
  const LlamaConfig preset = models::llama::llama_preset("qwen3-0.6b");
  EXPECT_TRUE(preset.qk_norm && preset.tie_word_embeddings && !preset.qkv_bias);
  EXPECT_EQ(preset.head_dim, 128);
  EXPECT_EQ(preset.num_attention_heads * preset.head_dim, 2 * preset.hidden_size);
}

TEST(LlamaSynthetic, RejectsAnInvalidConfigWithoutLeavingAFile) {
  LlamaConfig c = tiny();
  c.num_key_value_heads = 3;  // does not divide 8 heads
  SyntheticLlama spec;
  spec.config = c;
  const std::string file = temp_file("invalid");
  std::remove(file.c_str());
  EXPECT_THROW(models::llama::write_synthetic_llama(file, spec), Error);
  EXPECT_THROW(io::inspect_dataset_local(file, "model.norm.weight"), Error);
}

TEST(LlamaSynthetic, Int32DatasetsRoundTrip) {
  const std::string file = temp_file("int32");
  {
    io::Hdf5Writer w(file);
    w.create_dataset("ids", {3, 4}, io::StoredType::INT32);
    w.create_dataset("lengths", {5}, io::StoredType::INT32, /*chunked=*/true);
    w.create_dataset("weights", {2, 2}, io::StoredType::FLOAT32);
    const std::vector<int32_t> first{0, -1, 2147483647, -2147483647 - 1}, rest{4, 5, 6, 7, 8, 9, 10, 11};
    w.write_rows("ids", 0, first);
    w.write_rows("ids", 1, rest);
    w.write_rows("lengths", 0, std::vector<int32_t>{5, 4, 3});
    w.write_rows("lengths", 3, std::vector<int32_t>{2, 1});
    w.write_rows("weights", 0, std::vector<float>{1, 2, 3, 4});
    // The wrong element type for a dataset, and rows past its end, are errors.
    EXPECT_THROW(w.write_rows("ids", 0, std::vector<float>{1, 2, 3, 4}), Error);
    EXPECT_THROW(w.write_rows("weights", 0, std::vector<int32_t>{1, 2}), Error);
    EXPECT_THROW(w.write_rows("lengths", 4, std::vector<int32_t>{1, 2}), Error);
    EXPECT_THROW(w.create_dataset("wide", {2}, io::StoredType::INT64), Error);
    w.commit();
  }
  io::DatasetInfo info;
  EXPECT_EQ(io::read_int_dataset_local(file, "ids", &info),
            (std::vector<int64_t>{0, -1, 2147483647, -2147483648LL, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(info.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(info.type, io::StoredType::INT32);
  EXPECT_EQ(io::read_int_dataset_local(file, "lengths", &info), (std::vector<int64_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(info.shape, (std::vector<int64_t>{5}));
  const std::string message = testing::error_message_of([&] { io::read_int_dataset_local(file, "weights"); });
  EXPECT_NE(message.find("'weights'"), std::string::npos) << message;
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find("float32"), std::string::npos) << message;
  EXPECT_THROW(io::read_int_dataset_local(file, "missing"), Error);
}

TEST(LlamaSynthetic, TokenFilesHoldSeededIdsAndRaggedLengths) {
  const std::string file = temp_file("tokens");
  const int64_t batch = 6, len = 9, vocab = 250;
  models::llama::write_synthetic_tokens(file, batch, len, vocab, /*ragged=*/true, kSeed);
  io::DatasetInfo info;
  const std::vector<int64_t> tokens = io::read_int_dataset_local(file, "tokens", &info);
  EXPECT_EQ(info.shape, (std::vector<int64_t>{batch, len}));
  EXPECT_EQ(info.type, io::StoredType::INT32);
  const std::vector<int64_t> lengths = io::read_int_dataset_local(file, "prompt_lengths", &info);
  EXPECT_EQ(info.shape, (std::vector<int64_t>{batch}));
  ASSERT_EQ(lengths.size(), static_cast<size_t>(batch));
  EXPECT_EQ(lengths.back(), len);
  bool varied = false;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = lengths[static_cast<size_t>(b)];
    EXPECT_TRUE(n >= 1 && n <= len) << n;
    varied |= n != len;
    for (int64_t t = 0; t < len; ++t) {
      const int64_t id = tokens[static_cast<size_t>(b * len + t)];
      if (t < n) EXPECT_TRUE(id >= 0 && id < vocab) << id;
      else EXPECT_EQ(id, 0) << "request " << b << " position " << t;
    }
  }
  EXPECT_TRUE(varied);
  const std::string dense = temp_file("tokens_dense");
  models::llama::write_synthetic_tokens(dense, 2, 4, vocab, /*ragged=*/false, kSeed);
  EXPECT_THROW(io::inspect_dataset_local(dense, "prompt_lengths"), Error);
  EXPECT_EQ(io::read_int_dataset_local(dense, "tokens").size(), 8u);
}

// --- The reference -----------------------------------------------------------------------------

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

// A synthetic tensor's values straight from the generator, as doubles.
std::vector<double> generated(uint64_t id, int64_t count, double scale, double offset = 0.0) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(offset + io::synthetic_value(kSeed, id, i, scale));
  return v;
}

std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x) {
  std::vector<double> y(w.size() / x.size(), 0.0);
  for (size_t o = 0; o < y.size(); ++o)
    for (size_t i = 0; i < x.size(); ++i) y[o] += w[o * x.size() + i] * x[i];
  return y;
}

std::vector<double> normed(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  const double inv = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// Logits of the one-token sequence [token] of the synthetic model `c`, computed from the generator
// (not the file). With one token, RoPE at position 0 is the identity and softmax over one key is 1,
// so attention returns v of each head's KV head: no q, k or rotation involved.
std::vector<double> one_token_logits(const LlamaConfig& c, int32_t token) {
  const int64_t h = c.hidden_size, hd = c.head_dim, group = c.num_attention_heads / c.num_key_value_heads;
  const int64_t q_width = c.num_attention_heads * hd, im = c.intermediate_size;
  const std::vector<double> embed = generated(kEmbedId, c.vocab_size * h, 1.0);
  std::vector<double> x(embed.begin() + token * h, embed.begin() + (token + 1) * h);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto a = normed(x, generated(layer_id(l, kInNorm), h, 0.2, 1.0), c.rms_norm_eps);
    const auto v = matvec(generated(layer_id(l, kV), c.num_key_value_heads * hd * h, linear_scale(h)), a);
    std::vector<double> attn(static_cast<size_t>(q_width));
    for (int64_t head = 0; head < c.num_attention_heads; ++head)
      for (int64_t d = 0; d < hd; ++d)
        attn[static_cast<size_t>(head * hd + d)] = v[static_cast<size_t>((head / group) * hd + d)];
    const auto o = matvec(generated(layer_id(l, kO), h * q_width, linear_scale(q_width)), attn);
    for (int64_t i = 0; i < h; ++i) x[static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
    const auto m = normed(x, generated(layer_id(l, kPostNorm), h, 0.2, 1.0), c.rms_norm_eps);
    const auto g = matvec(generated(layer_id(l, kGate), im * h, linear_scale(h)), m);
    const auto u = matvec(generated(layer_id(l, kUp), im * h, linear_scale(h)), m);
    std::vector<double> act(g.size());
    for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const auto down = matvec(generated(layer_id(l, kDown), h * im, linear_scale(im)), act);
    for (int64_t i = 0; i < h; ++i) x[static_cast<size_t>(i)] += down[static_cast<size_t>(i)];
  }
  const auto head = c.tie_word_embeddings ? embed : generated(kLmHeadId, c.vocab_size * h, linear_scale(h));
  return matvec(head, normed(x, generated(kFinalNormId, h, 0.2, 1.0), c.rms_norm_eps));
}

void expect_one_token_logits(const LlamaConfig& c, const std::string& file, int32_t token) {
  const auto expected = one_token_logits(c, token);
  const std::vector<int32_t> tokens{token};
  const auto logits = testing::llama_reference_logits(file, tokens);
  ASSERT_EQ(logits.size(), 1u);
  ASSERT_EQ(logits[0].size(), static_cast<size_t>(c.vocab_size));
  double scale = 0;
  for (double v : expected) scale = std::max(scale, std::abs(v));
  EXPECT_GT(scale, 0.1);  // not a degenerate model
  EXPECT_LT(max_abs_difference(logits[0], expected), 1e-9 * scale);
}

TEST(LlamaReference, OneTokenLogitsMatchAHandComputation) {
  const LlamaConfig c = tiny();
  expect_one_token_logits(c, tiny_file("tiny_f32", c), 37);
}

TEST(LlamaReference, TiedModelsUseTheEmbeddingAsLmHead) {
  LlamaConfig c = tiny();
  c.tie_word_embeddings = true;
  c.num_hidden_layers = 1;
  expect_one_token_logits(c, tiny_file("tiny_tied", c), 201);
}

TEST(LlamaReference, IsCausalAndMixesEarlierPositions) {
  const std::string file = tiny_file("tiny_f32", tiny());
  const std::vector<int32_t> ab{5, 17, 200}, ac{5, 99, 200}, db{42, 17, 200};
  const auto l_ab = testing::llama_reference_logits(file, ab);
  const auto l_ac = testing::llama_reference_logits(file, ac);
  const auto l_db = testing::llama_reference_logits(file, db);
  ASSERT_EQ(l_ab.size(), 3u);
  EXPECT_EQ(l_ab[0], l_ac[0]);  // position 0 cannot see position 1
  EXPECT_GT(max_abs_difference(l_ab[1], l_ac[1]), 1e-3);
  EXPECT_GT(max_abs_difference(l_ab[2], l_ac[2]), 1e-3);  // ... but position 2 sees it
  EXPECT_GT(max_abs_difference(l_ab[1], l_db[1]), 1e-3);  // position 1 sees position 0
  // A prefix gives the same logits as the longer sequence at its positions.
  const auto prefix = testing::llama_reference_logits(file, std::span(ab).first(2));
  EXPECT_EQ(prefix[0], l_ab[0]);
  EXPECT_EQ(prefix[1], l_ab[1]);
}

TEST(LlamaReference, RopeThetaMattersFromPositionOneOn) {
  LlamaConfig c = tiny();
  const std::string base = tiny_file("tiny_f32", c);
  c.rope_theta = 500000.0;
  const std::string other = tiny_file("tiny_theta", c);
  const std::vector<int32_t> tokens{3, 141, 59};
  const auto a = testing::llama_reference_logits(base, tokens);
  const auto b = testing::llama_reference_logits(other, tokens);
  EXPECT_EQ(a[0], b[0]);  // rotation by angle 0 at position 0
  EXPECT_GT(max_abs_difference(a[1], b[1]), 1e-4);
  EXPECT_GT(max_abs_difference(a[2], b[2]), 1e-4);
}

TEST(LlamaReference, RejectsBadTokens) {
  const std::string file = tiny_file("tiny_f32", tiny());
  const std::vector<int32_t> bad{1, 250};
  EXPECT_NE(testing::error_message_of([&] { testing::llama_reference_logits(file, bad); }).find("outside [0, 250)"),
            std::string::npos);
  EXPECT_THROW(testing::llama_reference_logits(file, std::span<const int32_t>()), Error);
}

}  // namespace
}  // namespace meshnn
