// A model's sampling defaults from its generation_config.json (models/generation_config.hpp), as
// transformers reads them, on files shaped like real models' and with the command line's options.
#include <gtest/gtest.h>

#include "meshnn/core/error.hpp"
#include "meshnn/models/generation_config.hpp"
#include "support/test_helpers.hpp"

namespace meshnn::models {
namespace {

using serving::LogitPenalties;
using serving::SamplingMode;
using serving::SamplingParams;

struct Applied {
  SamplingParams sampling;
  LogitPenalties penalties;
  std::string taken;
};

// meshnn-llm's defaults (greedy, temperature 1, top_k 50, top_p 0.9), then the file's.
Applied applied(const std::string& json, const SamplingGiven& given = {}, const SamplingParams& start = {}) {
  Applied a{start, {}, ""};
  a.taken = apply_model_sampling(read_model_sampling(json, "g.json"), given, "g.json", a.sampling, a.penalties);
  return a;
}

TEST(GenerationConfig, SamplesAsTheModelsFileSays) {
  // Qwen2.5-Instruct's file.
  const Applied qwen = applied(R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
      "pad_token_id": 151643, "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20})");
  EXPECT_EQ(qwen.sampling.mode, SamplingMode::TOP_P);
  EXPECT_EQ(qwen.sampling.temperature, 0.7);
  EXPECT_EQ(qwen.sampling.top_k, 20);
  EXPECT_EQ(qwen.sampling.top_p, 0.8);
  EXPECT_EQ(qwen.penalties.repetition, 1.05);
  EXPECT_EQ(qwen.taken, "top-p, temperature 0.7, top_k 20, top_p 0.8, repetition_penalty 1.05");

  // Llama 3 Instruct's: no top_k, so transformers' default of 50; meshnn's top_p of 0.9 would
  // otherwise stay, but the file's is taken.
  const Applied llama3 = applied(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [128001]})");
  EXPECT_EQ(llama3.sampling.mode, SamplingMode::TOP_P);
  EXPECT_EQ(llama3.sampling.top_k, 50);
  EXPECT_EQ(llama3.taken, "top-p, temperature 0.6, top_k 50, top_p 0.9");

  // do_sample alone: transformers' defaults, top_p 1 (not meshnn's 0.9).
  const Applied bare = applied(R"({"do_sample": true})");
  EXPECT_EQ(bare.sampling.temperature, 1.0);
  EXPECT_EQ(bare.sampling.top_p, 1.0);
  EXPECT_EQ(bare.sampling.top_k, 50);
}

TEST(GenerationConfig, GreedyUnlessTheFileSamples) {
  // TinyLlama's file: ids and lengths only. Nothing changes.
  const Applied tiny = applied(R"({"bos_token_id": 1, "eos_token_id": 2, "max_length": 2048, "pad_token_id": 0})");
  EXPECT_EQ(tiny.sampling, SamplingParams{});
  EXPECT_EQ(tiny.penalties, LogitPenalties{});
  EXPECT_EQ(tiny.taken, "");
  // Without do_sample transformers is greedy and ignores temperature and top_p; a
  // repetition_penalty applies all the same.
  const Applied greedy = applied(R"({"temperature": 0.6, "top_p": 0.5, "repetition_penalty": 1.2})");
  EXPECT_EQ(greedy.sampling, SamplingParams{});
  EXPECT_EQ(greedy.penalties.repetition, 1.2);
  EXPECT_EQ(greedy.taken, "repetition_penalty 1.2");
  EXPECT_EQ(applied(R"({"do_sample": false, "temperature": 0.6})").taken, "greedy");
}

TEST(GenerationConfig, TheCommandLinesOptionsWin) {
  const std::string qwen = R"({"do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                               "repetition_penalty": 1.05})";
  // --sampling greedy: greedy, though the file samples; its repetition_penalty still applies.
  const Applied greedy = applied(qwen, SamplingGiven{.mode = true});
  EXPECT_EQ(greedy.sampling.mode, SamplingMode::GREEDY);
  EXPECT_EQ(greedy.penalties.repetition, 1.05);
  // --temperature 0.3 --repetition-penalty 1: the rest from the file.
  SamplingParams start;
  start.temperature = 0.3;
  const Applied mixed = applied(qwen, SamplingGiven{.temperature = true, .repetition_penalty = true}, start);
  EXPECT_EQ(mixed.sampling.mode, SamplingMode::TOP_P);
  EXPECT_EQ(mixed.sampling.temperature, 0.3);
  EXPECT_EQ(mixed.sampling.top_p, 0.8);
  EXPECT_EQ(mixed.penalties.repetition, 1.0);
  // --sampling top-k on a file without do_sample: the file's top_k is taken.
  start = SamplingParams{};
  start.mode = SamplingMode::TOP_K;
  const Applied top_k = applied(R"({"top_k": 7})", SamplingGiven{.mode = true}, start);
  EXPECT_EQ(top_k.sampling.top_k, 7);
  EXPECT_EQ(top_k.taken, "top_k 7");
}

TEST(GenerationConfig, BadFilesAreNamed) {
  auto message = [](const std::string& json) { return testing::error_message_of([&] { applied(json); }); };
  EXPECT_NE(message("[1]").find("'g.json' is not a JSON object"), std::string::npos);
  EXPECT_NE(message("{").find("'g.json' is not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"do_sample": "yes"})").find(R"(g.json: 'do_sample' must be true or false, got "yes")"),
            std::string::npos);
  EXPECT_NE(message(R"({"top_k": 2.5})").find("g.json: 'top_k' must be an integer"), std::string::npos);
  EXPECT_NE(message(R"({"temperature": "hot"})").find("g.json: 'temperature' must be a number"), std::string::npos);
  const std::string zero = message(R"({"do_sample": true, "temperature": 0})");
  EXPECT_NE(zero.find("g.json: temperature must be > 0 for top-p sampling, got 0"), std::string::npos) << zero;
  EXPECT_NE(zero.find("--generation-config none"), std::string::npos);
  EXPECT_NE(message(R"({"repetition_penalty": 0})").find("repetition_penalty must be in (0, 100]"), std::string::npos);
}

}  // namespace
}  // namespace meshnn::models
