// meshnn-mask-bench: what structured output's token mask (serving/token_mask.hpp) costs a decode
// step, per constrained request and per rank, over a tokenizer's vocabulary whole and split into
// the shards tp gives each rank. The mask is timed at the state before each token of JSON answers
// as the tokenizer writes them; beside it, the plain way to the same mask (each token's bytes fed
// to a copy of the cursor, one token at a time) is timed at every eighth state, as the peer. Every
// answer's own tokens must be allowed, and both ways must agree token for token.
//
//   build/apps/meshnn-mask-bench --tokenizer DIR_OR_FILE --answers FILE [--schema FILE] [--steps 2000]
//                                [--shards 1,2,4] [--json FILE]
//
// scripts/mask_bench.sh trains a 32000-token SentencePiece model (as Llama 2's and TinyLlama's) on
// text found on the machine, writes answers, and runs this.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>

#include "meshnn/core/error.hpp"
#include "meshnn/runtime/cli.hpp"
#include "meshnn/serving/json_cursor.hpp"
#include "meshnn/serving/json_grammar.hpp"
#include "meshnn/serving/token_mask.hpp"
#include "meshnn/text/load.hpp"
#include "meshnn/text/text_stream.hpp"

using namespace meshnn;
using serving::JsonCursor;

namespace {

using Clock = std::chrono::steady_clock;

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

struct Summary {
  double median = 0, p90 = 0, max = 0, mean = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v[v.size() / 2];
  s.p90 = v[std::min(v.size() - 1, v.size() * 9 / 10)];
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

std::string json_of(const Summary& s) {
  return fmt::format(R"({{"median": {:.1f}, "p90": {:.1f}, "max": {:.1f}, "mean": {:.1f}}})", s.median, s.p90, s.max,
                     s.mean);
}

// The plain way: every token's bytes fed to a copy of the cursor.
std::vector<uint8_t> allowed_one_by_one(const serving::TokenBytes& bytes, const JsonCursor& at) {
  std::vector<uint8_t> allowed(bytes.size(), 0);
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (bytes[id].empty()) continue;
    JsonCursor c = at;
    allowed[id] = c.feed(bytes[id]) ? 1 : 0;
  }
  return allowed;
}

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime&, int argc, char** argv) {
    std::string tokenizer_path, answers_file, schema_file, json_file;
    int steps = 2000;
    std::vector<int> shard_counts{1, 2, 4};
    CLI::App cli("Cost of structured output's token mask per decode step and rank.", "meshnn-mask-bench");
    cli.add_option("--tokenizer", tokenizer_path, "tokenizer.model, tokenizer.json or a model directory")->required();
    cli.add_option("--answers", answers_file, "answers the grammar takes, separated by the byte 0x1e")->required();
    cli.add_option("--schema", schema_file, "a JSON Schema file (default: any JSON object, as json_object)");
    cli.add_option("--steps", steps, "answer tokens to time the mask before, at most")->transform(IntRange(8, 1000000));
    cli.add_option("--shards", shard_counts, "vocabulary shards (ranks of tp) to time")->delimiter(',');
    cli.add_option("--json", json_file, "write the figures to this file");
    parse_command_line(cli, argc, argv);

    const std::optional<text::LoadedTokenizer> loaded = text::load_tokenizer(tokenizer_path);
    MESHNN_CHECK(loaded.has_value(), "no tokenizer at {}", tokenizer_path);
    const text::Tokenizer& tokenizer = *loaded->tokenizer;
    const auto bytes =
        std::make_shared<const serving::TokenBytes>(text::vocabulary_texts(tokenizer, tokenizer.vocab_size()));
    const auto vocab = static_cast<int64_t>(bytes->size());
    std::string schema = R"({"type":"object"})";
    if (!schema_file.empty()) {
      std::ifstream f(schema_file);
      MESHNN_CHECK(f.good(), "cannot read {}", schema_file);
      std::stringstream s;
      s << f.rdbuf();
      schema = s.str();
    }
    const auto grammar = serving::JsonGrammar::from_schema(schema);

    // One mask per shard of each split, as the ranks of tp hold them (torch.chunk: equal shards).
    struct Split {
      int shards;
      std::vector<serving::TokenMask> masks;
      std::vector<double> per_rank;  // microseconds per state: the mean of the shards' times
    };
    std::vector<Split> splits;
    for (int s : shard_counts) {
      MESHNN_CHECK(s >= 1 && s <= 64, "--shards: {} is not in [1, 64]", s);
      Split split{s, {}, {}};
      const int64_t width = (vocab + s - 1) / s;
      for (int k = 0; k < s; ++k) {
        const int64_t valid = std::max<int64_t>(0, std::min(width, vocab - k * width));
        split.masks.emplace_back(bytes, serving::VocabShard{k * width, valid});
      }
      splits.push_back(std::move(split));
    }

    // The answers, tokenized as the model would write them; the states are those before each token.
    std::ifstream answers_in(answers_file, std::ios::binary);
    MESHNN_CHECK(answers_in.good(), "cannot read {}", answers_file);
    std::vector<std::string> answers;
    for (std::string answer; std::getline(answers_in, answer, '\x1e');)
      if (answer.find_first_not_of(" \n") != std::string::npos) answers.push_back(answer);
    MESHNN_CHECK(!answers.empty(), "{} holds no answers (separated by the byte 0x1e)", answers_file);

    serving::TokenMask whole(bytes, serving::VocabShard{0, vocab});
    std::vector<double> peer, allowed_counts;
    std::vector<float> row(static_cast<size_t>(vocab));
    int64_t states = 0, mismatches = 0;
    for (const std::string& answer : answers) {
      if (states >= steps) break;
      JsonCursor cursor(*grammar);
      for (const int32_t token : tokenizer.encode(answer)) {
        if (states++ >= steps) break;
        for (Split& split : splits) {
          double total = 0;
          for (serving::TokenMask& mask : split.masks) {
            std::fill(row.begin(), row.end(), 0.0f);
            const auto start = Clock::now();
            mask.apply(row, cursor);
            total += micros_since(start);
          }
          split.per_rank.push_back(total / split.shards);
        }
        // The whole vocabulary's mask, untimed: it must allow the answer's own token, and agree with
        // the plain way (timed at every eighth state).
        std::fill(row.begin(), row.end(), 0.0f);
        whole.apply(row, cursor);
        allowed_counts.push_back(static_cast<double>(std::count(row.begin(), row.end(), 0.0f)));
        MESHNN_CHECK(row[static_cast<size_t>(token)] == 0.0f, "the mask refuses token {} ('{}') of a valid answer",
                     token, (*bytes)[static_cast<size_t>(token)]);
        if (states % 8 == 0) {
          const auto start = Clock::now();
          const std::vector<uint8_t> plain = allowed_one_by_one(*bytes, cursor);
          peer.push_back(micros_since(start));
          for (int64_t id = 0; id < vocab; ++id)
            mismatches += (plain[static_cast<size_t>(id)] != 0) != (row[static_cast<size_t>(id)] == 0.0f) ? 1 : 0;
        }
        MESHNN_CHECK(cursor.feed((*bytes)[static_cast<size_t>(token)]), "token {} leaves the grammar", token);
      }
    }
    MESHNN_CHECK(mismatches == 0, "the mask and the plain way disagree on {} tokens", mismatches);
    steps = static_cast<int>(std::min<int64_t>(states, steps));

    std::printf("tokenizer %s (%s, %lld tokens), schema %s, the states before %d answer tokens\n",
                tokenizer_path.c_str(), tokenizer.kind().c_str(), static_cast<long long>(vocab),
                schema_file.empty() ? "any object" : schema_file.c_str(), steps);
    const Summary allowed = summarize(allowed_counts), plain = summarize(peer);
    std::printf("tokens allowed per state: median %.0f, p90 %.0f, max %.0f\n", allowed.median, allowed.p90,
                allowed.max);
    std::printf("the plain way (each token fed alone), whole vocabulary: median %.0f us, p90 %.0f, max %.0f\n",
                plain.median, plain.p90, plain.max);
    std::string records;
    for (const Split& split : splits) {
      const Summary s = summarize(split.per_rank);
      std::printf("mask per rank, %d shard(s): median %.0f us, p90 %.0f, max %.0f, mean %.0f", split.shards, s.median,
                  s.p90, s.max, s.mean);
      if (split.shards == 1) std::printf("; the plain way / ours (medians) %.1fx", plain.median / s.median);
      std::printf("\n");
      records += fmt::format(R"({}{{"shards": {}, "per_rank_us": {}}})", records.empty() ? "" : ", ", split.shards,
                             json_of(s));
    }
    if (!json_file.empty()) {
      std::ofstream f(json_file);
      f << fmt::format(R"({{"tokenizer": "{}", "vocab": {}, "schema": "{}", "steps": {}, "allowed": {}, )"
                       R"("plain_whole_us": {}, "mask": [{}]}})",
                       tokenizer.kind(), vocab, schema_file.empty() ? "any object" : schema_file, steps,
                       json_of(allowed), json_of(plain), records)
        << '\n';
      MESHNN_CHECK(f.good(), "cannot write {}", json_file);
    }
    return 0;
  });
}
