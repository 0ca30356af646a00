#include "meshnn/models/llama/llm_job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "meshnn/core/memory.hpp"
#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/models/report.hpp"
#include "meshnn/runtime/memory.hpp"
#include "meshnn/serving/generator.hpp"
#include "meshnn/text/text_stream.hpp"
#include "meshnn/text/utf8.hpp"
#include "requests.hpp"

namespace meshnn::models::llama {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Runs fn on world rank 0 only; every rank learns whether it failed (and throws alike).
template <class Fn>
void on_root(const MeshDevice& mesh, const std::string& what, Fn&& fn) {
  std::string message;
  if (mesh.device_id() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  agree_on_failure(mesh.comm(), what, message.empty(), message);
}

// Runs fn on every rank; a rank-local failure (a file) becomes the same error everywhere.
template <class Fn>
void on_every_rank(const MeshDevice& mesh, const std::string& what, Fn&& fn) {
  std::string message;
  try {
    fn();
  } catch (const std::exception& e) {
    message = e.what();
  }
  agree_on_failure(mesh.comm(), what, message.empty(), message);
}

std::string weights_file(const LlmJobConfig& c, const MeshDevice& mesh) {
  if (!c.weights.empty()) return c.weights;
  const std::string path = generated_model_path(c.preset, c.layers, c.seed);
  on_root(mesh, "generating the synthetic model", [&] {
    if (std::filesystem::exists(path)) return;
    SyntheticLlama spec;
    spec.config = llama_preset(c.preset);
    if (c.layers > 0) spec.config.num_hidden_layers = c.layers;
    spec.seed = c.seed;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::printf("generating %s (once; later runs reuse it) ...\n", path.c_str());
    std::fflush(stdout);
    write_synthetic_llama(path, spec);
  });
  return path;
}

struct Replicas {
  MeshDevicePtr group;  // this rank's tensor-parallel group
  int index = 0, count = 1;
};

Replicas make_replicas(const LlmJobConfig& c, const MeshDevicePtr& mesh) {
  if (c.mode == ParallelMode::TP || c.mode == ParallelMode::TWO_D) return {mesh, 0, 1};
  const MeshShape shape = c.mode == ParallelMode::DP ? MeshShape{1, 1} : c.submesh.value_or(MeshShape{1, mesh->num_cols()});
  const auto subs = mesh->create_submeshes(shape);
  return {subs.mine, subs.index, subs.count};
}

// Every replica's rows of a [requests, ...] matrix reach every rank: rows a replica did not run
// hold the lowest value, so an element-wise MAX over the mesh (meshnn's own all_reduce) merges them.
template <class T>
void merge_replica_rows(std::vector<T>& values, const Shape& shape, const MeshDevicePtr& mesh, int replicas) {
  if (replicas == 1 || mesh->num_devices() == 1) return;
  Tensor local;
  if constexpr (std::is_same_v<T, int32_t>)
    local = Tensor::from_int32(values, shape, Layout::ROW_MAJOR);
  else
    local = Tensor::from_float(values, shape, DataType::FLOAT32, Layout::ROW_MAJOR);
  const MeshTensor merged = all_reduce(MeshTensor(mesh, shape, {Replicate{}, Replicate{}}, local), ReduceOp::MAX);
  std::copy_n(merged.local().data<T>(), values.size(), values.data());
}

}  // namespace

std::string generated_model_path(const std::string& preset, int64_t layers, uint64_t seed) {
  std::string dir;
  if (const char* d = std::getenv("MESHNN_CACHE_DIR"); d != nullptr && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x) {
    dir = std::string(x) + "/meshnn";
  } else {
    const char* home = std::getenv("HOME");
    dir = std::string(home != nullptr && *home ? home : "/tmp") + "/.cache/meshnn";
  }
  return fmt::format("{}/llama-{}{}-seed{}.h5", dir, preset, layers > 0 ? fmt::format("-{}layers", layers) : "", seed);
}

int run_llm_job(const LlmJobConfig& c) {
  MESHNN_CHECK(c.max_batch >= 1, "--max-batch must be >= 1, got {}", c.max_batch);
  c.sampling.validate();
  auto mesh = MeshDevice::open(c.mesh, c.model.topology);
  const bool root = mesh->device_id() == 0;
  if (root) std::printf("%s\n", visualize_mesh_device(*mesh).c_str());

  const std::string file = weights_file(c, *mesh);
  const LlamaConfig config = config_from_attributes(io::read_root_attributes(file, mesh), file);
  JobRequests job;
  on_every_rank(*mesh, "preparing the requests", [&] { job = make_job_requests(c, config, file); });
  const std::vector<serving::GenerationRequest>& requests = job.requests;
  const text::Tokenizer* tokenizer = job.tokenizer ? job.tokenizer->tokenizer.get() : nullptr;
  // Checked before the (long) load: the same requests on every rank, so the same error.
  int64_t longest = 0;
  for (const auto& r : requests)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens);
  MESHNN_CHECK(longest <= config.max_position_embeddings,
               "a prompt plus its new tokens needs {} positions, beyond max_position_embeddings {}", longest,
               config.max_position_embeddings);
  const Replicas replicas = make_replicas(c, mesh);

  // Load: each rank reads only its shards.
  const size_t rss_before = current_rss_bytes();
  const auto load_start = Clock::now();
  LlamaOptions model_options = c.model;
  model_options.sharding = c.mode == ParallelMode::TWO_D ? LlamaSharding::TWO_D : LlamaSharding::TENSOR_PARALLEL;
  const LlamaModel model = LlamaModel::load(file, config, replicas.group, model_options);
  release_spare_buffers();  // what loading freed goes back to the system before the KV cache is made
  const double load_seconds = seconds_since(load_start);
  const double load_growth = static_cast<double>(peak_rss_bytes() - std::min(peak_rss_bytes(), rss_before));

  std::vector<serving::GenerationRequest> mine;
  for (size_t r = 0; r < requests.size(); ++r)
    if (static_cast<int>(r % replicas.count) == replicas.index) mine.push_back(requests[r]);
  const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(c.max_batch, static_cast<int64_t>(mine.size())));
  serving::KvCache cache = model.make_cache(slots, longest, c.kv_dtype);
  if (root) {
    if (!job.tokenizer_problem.empty())
      std::printf("warning: no text output: %s\n", job.tokenizer_problem.c_str());
    else if (tokenizer != nullptr)
      std::printf("tokenizer: %s (%s, %lld tokens)\n", job.tokenizer->source.c_str(), tokenizer->kind().c_str(),
                  static_cast<long long>(tokenizer->vocab_size()));
    std::printf("%s", model.describe().c_str());
    std::printf("  %-34s %s %s on every device: %lld slots x its %lld KV head(s) x %lld positions\n",
                "KV cache (per layer, K and V)", cache.layer_shape().to_string().c_str(),
                std::string(to_string(c.kv_dtype)).c_str(), static_cast<long long>(slots),
                static_cast<long long>(model.head_split().kv_heads), static_cast<long long>(cache.max_seq()));
    std::printf("  %-34s [users, %lld] float32, Shard(vocab) over the %d device(s) of %s; sampled without gathering\n",
                "logits", static_cast<long long>(config.vocab_size), model.mesh()->num_devices(),
                c.mode == ParallelMode::TWO_D ? "each mesh row" : "each group");
    std::printf("mode %s: %d replica(s) of a %s group; %zu request(s), %lld decode slot(s) per replica\n",
                std::string(to_string(c.mode)).c_str(), replicas.count, replicas.group->shape().to_string().c_str(),
                requests.size(), static_cast<long long>(slots));
    std::fflush(stdout);
  }

  serving::GenerationOptions go;
  go.prefill_chunk = c.prefill_chunk;
  go.sampling = c.sampling;
  if (!c.ignore_eos)
    for (int64_t id : job.stop_token_ids) go.stop_token_ids.push_back(static_cast<int32_t>(id));
  go.keep_logits = c.save_logits;
  // World rank 0 prints its replica's first request as it is generated: the prompt, then each
  // token's text as soon as it completes a character (ids beyond the tokenizer give no text).
  std::optional<text::TextStream> stream;
  if (root && tokenizer != nullptr && c.stream && !mine.empty()) {
    stream.emplace(*tokenizer);
    const size_t first = static_cast<size_t>(mine.front().id);
    const std::string prompt =
        job.prompt_texts.empty() ? text::sanitize_utf8(tokenizer->decode(mine.front().prompt)) : job.prompt_texts[first];
    std::printf("\nrequest %zu:\n%s", first, prompt.c_str());
    std::fflush(stdout);
    go.on_token = [&](size_t request, int32_t token, bool last) {
      if (request != 0) return;
      std::string piece = token < tokenizer->vocab_size() ? stream->push(token) : "";
      if (last) piece += stream->finish() + "\n";
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  }
  mesh->synchronize();
  const auto run_start = Clock::now();
  const serving::GenerationResult result = serving::generate(model, cache, mine, go);
  const double run_seconds = seconds_since(run_start);
  const serving::GenerationStats& s = result.stats;

  // Report: one row per rank.
  const bool leader = replicas.group->device_id() == 0;
  double mean_ttft = 0;
  for (const auto& o : result.outputs) mean_ttft += o.time_to_first_token / static_cast<double>(result.outputs.size());
  const double steps = std::max<double>(1, static_cast<double>(s.decode_steps));
  constexpr double kMiB = 1 << 20;
  const RankTable table = gather_rank_table(
      {{"load s", load_seconds},
       {"prefill s", s.prefill_seconds},
       {"mean TTFT s", mean_ttft},
       {"prefill comm s", s.prefill_times.communication},
       {"prefill mm s", s.prefill_times.matmul},
       {"decode ms/step", 1e3 * s.decode_seconds / steps},
       {"comm ms/step", 1e3 * s.decode_times.communication / steps},
       {"matmul ms/step", 1e3 * s.decode_times.matmul / steps},
       {"weights MiB", static_cast<double>(model.weight_bytes()) / kMiB},
       {"KV MiB", static_cast<double>(cache.bytes()) / kMiB},
       {"peak MiB", static_cast<double>(peak_rss_bytes()) / kMiB},
       {"load grow MiB", load_growth / kMiB},
       {"leader", leader ? 1.0 : 0.0, false},
       {"decode tokens", static_cast<double>(s.decode_tokens), false},
       {"decode s", s.decode_seconds, false},
       {"prefill tokens", static_cast<double>(s.prefill_tokens), false},
       {"sampling ms/step", 1e3 * s.sampling_seconds / steps, false},
       {"matmul weights MiB", static_cast<double>(model.matmul_weight_bytes()) / kMiB, false},
       {"generation s", run_seconds, false}},
      mesh->comm());
  // Replica totals: each replica's leader speaks for it.
  double aggregate_decode = 0, aggregate_prefill = 0, prefill_tokens = 0;
  for (size_t r = 0; r < table.rows.size(); ++r)
    if (table.value(r, "leader") == 1.0) {
      if (table.value(r, "decode s") > 0) aggregate_decode += table.value(r, "decode tokens") / table.value(r, "decode s");
      if (table.value(r, "prefill s") > 0)
        aggregate_prefill += table.value(r, "prefill tokens") / table.value(r, "prefill s");
      prefill_tokens += table.value(r, "prefill tokens");
    }

  // Tokens (and logits) of every request on every rank, padded with -1 after a request ended.
  int64_t longest_output = 0;
  for (const auto& r : requests) longest_output = std::max(longest_output, r.max_new_tokens);
  const int64_t n = static_cast<int64_t>(requests.size()), vocab = config.vocab_size;
  std::vector<int32_t> tokens(static_cast<size_t>(n * longest_output), -1);
  std::vector<float> logits;
  if (c.save_logits)
    logits.assign(static_cast<size_t>(n * longest_output * vocab), -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < mine.size(); ++i) {
    const int64_t r = static_cast<int64_t>(mine[i].id);
    const auto& out = result.outputs[i];
    std::copy(out.tokens.begin(), out.tokens.end(), tokens.begin() + r * longest_output);
    if (c.save_logits) std::copy(out.logits.begin(), out.logits.end(), logits.begin() + r * longest_output * vocab);
  }
  merge_replica_rows(tokens, Shape{n, longest_output}, mesh, replicas.count);
  if (c.save_logits) merge_replica_rows(logits, Shape{n, longest_output, vocab}, mesh, replicas.count);
  int64_t produced = 0, generated = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < longest_output; ++t)
      if (tokens[r * longest_output + t] >= 0) {
        produced = std::max(produced, t + 1);
        ++generated;
      }

  // The generated text of every request. Special tokens such as eos decode to nothing, and so do
  // ids beyond the tokenizer's vocabulary (models pad their embedding past it; a trained model
  // never samples those rows, a random one may).
  std::vector<std::string> completions;
  if (tokenizer != nullptr)
    for (int64_t r = 0; r < n; ++r) {
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < longest_output && tokens[r * longest_output + t] >= 0; ++t)
        if (tokens[r * longest_output + t] < tokenizer->vocab_size()) ids.push_back(tokens[r * longest_output + t]);
      completions.push_back(text::sanitize_utf8(tokenizer->decode(ids)));
    }

  if (root) {
    std::printf("\n%s", table.format().c_str());
    const double step_ms = table.max("decode ms/step");
    std::printf("prefill: %.0f tokens, %.1f tokens/s (all replicas), mean time to first token %.3f s; matmuls %.0f%% "
                "of the prefill time (slowest rank)\n",
                prefill_tokens, aggregate_prefill, table.max("mean TTFT s"),
                100.0 * table.max("prefill mm s") / std::max(1e-12, table.max("prefill s")));
    std::printf("decode: %.2f ms per step (steps holding no prompt rows; slowest rank), %.2f tokens/s per user, "
                "%.1f tokens/s in total (all "
                "replicas); per step: matmuls %.2f ms (%.0f%%), communication %.2f ms, sampling %.2f ms\n",
                step_ms, step_ms > 0 ? 1e3 / step_ms : 0.0, aggregate_decode, table.max("matmul ms/step"),
                100.0 * table.max("matmul ms/step") / std::max(1e-12, step_ms), table.max("comm ms/step"),
                table.max("sampling ms/step"));
    std::printf("matmul weights read per decode step: %.1f MiB per device; whole generation %.3f s\n",
                table.max("matmul weights MiB"), table.max("generation s"));
    for (int64_t r = 0; r < std::min<int64_t>(n, 8); ++r) {
      std::string line;
      if (tokenizer != nullptr) {
        // One line per request: the text with its line breaks shown as \n.
        for (char ch : completions[static_cast<size_t>(r)]) line += ch == '\n' ? std::string("\\n") : std::string(1, ch);
        line = "\"" + line + "\"";
      } else {
        for (int64_t t = 0; t < produced && tokens[r * longest_output + t] >= 0; ++t)
          line += fmt::format("{}{}", t ? " " : "", tokens[r * longest_output + t]);
      }
      std::printf("request %lld: %s\n", static_cast<long long>(r), line.c_str());
    }
    if (n > 8) std::printf("... (%lld requests in all)\n", static_cast<long long>(n));
  }

  on_root(*mesh, "writing the results", [&] {
    if (!c.output.empty()) {
      io::Hdf5Writer w(c.output);
      std::vector<int32_t> trimmed;
      for (int64_t r = 0; r < n; ++r)
        trimmed.insert(trimmed.end(), tokens.begin() + r * longest_output, tokens.begin() + r * longest_output + produced);
      w.create_dataset("tokens", {n, produced}, io::StoredType::INT32);
      w.write_rows("tokens", 0, std::span<const int32_t>(trimmed));
      if (c.save_logits) {
        std::vector<float> kept;
        for (int64_t r = 0; r < n; ++r)
          for (int64_t t = 0; t < produced; ++t) {
            const float* row = logits.data() + (r * longest_output + t) * vocab;
            const bool generated = tokens[r * longest_output + t] >= 0;
            for (int64_t v = 0; v < vocab; ++v) kept.push_back(generated ? row[v] : 0.0f);
          }
        w.create_dataset("logits", {n, produced, vocab}, io::StoredType::FLOAT32);
        w.write_rows("logits", 0, std::span<const float>(kept));
      }
      if (!completions.empty()) w.write_strings("text", completions);
      if (!job.prompt_texts.empty()) w.write_strings("prompts", job.prompt_texts);
      for (const auto& [name, value] : io::Attributes{
               {"mesh", c.mesh.to_string()},
               {"mode", std::string(to_string(c.mode))},
               {"weights", file},
               {"weight_dtype", std::string(to_string(c.model.weight_dtype))},
               {"act_dtype", std::string(to_string(c.model.act_dtype))},
               {"kv_dtype", std::string(to_string(c.kv_dtype))},
               {"sampling", std::string(serving::to_string(c.sampling.mode))},
               {"temperature", c.sampling.temperature},
               {"top_k", c.sampling.top_k},
               {"top_p", c.sampling.top_p},
               {"seed", static_cast<int64_t>(c.sampling.seed)},
               {"max_batch", c.max_batch},
               {"prefill_seconds", table.max("prefill s")},
               {"decode_ms_per_step", table.max("decode ms/step")},
               {"decode_tokens_per_second", aggregate_decode}})
        w.set_attribute(name, value);
      w.commit();
      std::printf("wrote %s\n", c.output.c_str());
    }
    if (!c.json.empty()) {
      const nlohmann::ordered_json record = {
          {"ranks", mesh->num_devices()},
          {"mesh", c.mesh.to_string()},
          {"mode", to_string(c.mode)},
          {"weight_dtype", to_string(c.model.weight_dtype)},
          {"act_dtype", to_string(c.model.act_dtype)},
          {"kv_dtype", to_string(c.kv_dtype)},
          {"requests", n},
          {"max_batch", c.max_batch},
          {"layers", config.num_hidden_layers},
          {"hidden", config.hidden_size},
          {"load_s", table.max("load s")},
          {"prefill_s", table.max("prefill s")},
          {"prefill_tokens_per_s", aggregate_prefill},
          {"prefill_matmul_s", table.max("prefill mm s")},
          {"mean_ttft_s", table.max("mean TTFT s")},
          {"decode_ms_per_step", table.max("decode ms/step")},
          {"decode_matmul_ms_per_step", table.max("matmul ms/step")},
          {"decode_comm_ms_per_step", table.max("comm ms/step")},
          {"decode_tokens_per_s", aggregate_decode},
          {"matmul_weight_bytes", table.max("matmul weights MiB") * kMiB},
          {"generated_tokens", generated},
          {"generation_s", table.max("generation s")},
          {"peak_mib", table.max("peak MiB")},
          {"weights_mib", table.max("weights MiB")},
          {"kv_mib", table.max("KV MiB")}};
      std::ofstream out(c.json);
      out << record.dump() << '\n';
      if (!out.good()) throw Error(fmt::format("cannot write '{}'", c.json));
    }
  });
  return 0;
}

}  // namespace meshnn::models::llama
