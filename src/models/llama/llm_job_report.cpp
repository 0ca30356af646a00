#include "llm_job_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "meshnn/core/error.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/runtime/memory.hpp"
#include "meshnn/text/text_stream.hpp"

namespace meshnn::models::llama {
namespace {

constexpr double kMiB = 1 << 20;

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

// The generated text of every request (text::generated_text: special tokens and ids beyond the
// tokenizer decode to nothing).
std::vector<std::string> decode_completions(const JobOutputs& o, const text::Tokenizer& tokenizer) {
  std::vector<std::string> completions;
  for (int64_t r = 0; r < o.n; ++r) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < o.longest_output && o.tokens[r * o.longest_output + t] >= 0; ++t)
      ids.push_back(o.tokens[r * o.longest_output + t]);
    completions.push_back(text::generated_text(tokenizer, ids));
  }
  return completions;
}

// One line per request: its text with line breaks shown as \n, or its ids without a tokenizer.
std::string request_line(const JobOutputs& o, int64_t r, const text::Tokenizer* tokenizer) {
  std::string line;
  if (tokenizer != nullptr) {
    for (char ch : o.completions[static_cast<size_t>(r)]) line += ch == '\n' ? std::string("\\n") : std::string(1, ch);
    line = "\"" + line + "\"";
  } else {
    for (int64_t t = 0; t < o.produced && o.tokens[r * o.longest_output + t] >= 0; ++t)
      line += fmt::format("{}{}", t ? " " : "", o.tokens[r * o.longest_output + t]);
  }
  return line;
}

}  // namespace

JobFigures gather_job_figures(const LoadedModel& loaded, const serving::KvCache& cache, const Generation& generation,
                              bool leader, MPI_Comm comm) {
  const LlamaModel& model = loaded.model;
  const serving::GenerationStats& s = generation.result.stats;
  double mean_ttft = 0;
  for (const auto& o : generation.result.outputs)
    mean_ttft += o.time_to_first_token / static_cast<double>(generation.result.outputs.size());
  const double steps = std::max<double>(1, static_cast<double>(s.decode_steps));
  JobFigures f;
  f.table = gather_rank_table(
      {{"load s", loaded.seconds},
       {"warm-up s", generation.warm_up_seconds},
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
       {"load grow MiB", loaded.growth_bytes / kMiB},
       {"leader", leader ? 1.0 : 0.0, false},
       {"decode tokens", static_cast<double>(s.decode_tokens), false},
       {"decode s", s.decode_seconds, false},
       {"prefill tokens", static_cast<double>(s.prefill_tokens), false},
       {"reused tokens", static_cast<double>(s.reused_prompt_tokens), false},
       {"sampling ms/step", 1e3 * s.sampling_seconds / steps, false},
       {"matmul weights MiB", static_cast<double>(model.matmul_weight_bytes()) / kMiB, false},
       {"generation s", generation.seconds, false},
       {"drafted", static_cast<double>(s.drafted_tokens), false},
       {"drafts kept", static_cast<double>(s.accepted_draft_tokens), false},
       {"forced", static_cast<double>(s.forced_tokens), false}},
      comm);
  const RankTable& table = f.table;
  for (size_t r = 0; r < table.rows.size(); ++r)
    if (table.value(r, "leader") == 1.0) {
      if (table.value(r, "decode s") > 0) f.decode_tokens_per_s += table.value(r, "decode tokens") / table.value(r, "decode s");
      if (table.value(r, "prefill s") > 0)
        f.prefill_tokens_per_s += table.value(r, "prefill tokens") / table.value(r, "prefill s");
      f.prefill_tokens += table.value(r, "prefill tokens");
      f.reused_prompt_tokens += table.value(r, "reused tokens");
      f.drafted_tokens += table.value(r, "drafted");
      f.accepted_draft_tokens += table.value(r, "drafts kept");
      f.forced_tokens += table.value(r, "forced");
    }
  return f;
}

JobOutputs gather_outputs(const LlmJobConfig& c, const JobRequests& job, int64_t vocab,
                          const std::vector<serving::GenerationRequest>& mine, const serving::GenerationResult& result,
                          const MeshDevicePtr& mesh, int replicas) {
  JobOutputs o;
  for (const auto& r : job.requests) o.longest_output = std::max(o.longest_output, r.max_new_tokens);
  o.n = static_cast<int64_t>(job.requests.size());
  o.vocab = vocab;
  const int64_t n = o.n, longest_output = o.longest_output;
  o.tokens.assign(static_cast<size_t>(n * longest_output), -1);
  if (c.save_logits)
    o.logits.assign(static_cast<size_t>(n * longest_output * vocab), -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < mine.size(); ++i) {
    const int64_t r = static_cast<int64_t>(mine[i].id);
    const auto& out = result.outputs[i];
    std::copy(out.tokens.begin(), out.tokens.end(), o.tokens.begin() + r * longest_output);
    if (c.save_logits) std::copy(out.logits.begin(), out.logits.end(), o.logits.begin() + r * longest_output * vocab);
  }
  merge_replica_rows(o.tokens, Shape{n, longest_output}, mesh, replicas);
  if (c.save_logits) merge_replica_rows(o.logits, Shape{n, longest_output, vocab}, mesh, replicas);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < longest_output; ++t)
      if (o.tokens[r * longest_output + t] >= 0) {
        o.produced = std::max(o.produced, t + 1);
        ++o.generated;
      }
  if (const text::Tokenizer* tokenizer = job.text_tokenizer(); tokenizer != nullptr)
    o.completions = decode_completions(o, *tokenizer);
  return o;
}

void print_report(const JobFigures& figures, const JobOutputs& outputs, const text::Tokenizer* tokenizer) {
  const RankTable& table = figures.table;
  std::printf("\n%s", table.format().c_str());
  const double step_ms = table.max("decode ms/step");
  std::printf("prefill: %.0f tokens, %.1f tokens/s (all replicas), mean time to first token %.3f s; matmuls %.0f%% "
              "of the prefill time (slowest rank)\n",
              figures.prefill_tokens, figures.prefill_tokens_per_s, table.max("mean TTFT s"),
              100.0 * table.max("prefill mm s") / std::max(1e-12, table.max("prefill s")));
  std::printf("decode: %.2f ms per step (steps holding no prompt rows; slowest rank), %.2f tokens/s per user, "
              "%.1f tokens/s in total (all "
              "replicas); per step: matmuls %.2f ms (%.0f%%), communication %.2f ms, sampling %.2f ms\n",
              step_ms, step_ms > 0 ? 1e3 / step_ms : 0.0, figures.decode_tokens_per_s, table.max("matmul ms/step"),
              100.0 * table.max("matmul ms/step") / std::max(1e-12, step_ms), table.max("comm ms/step"),
              table.max("sampling ms/step"));
  if (figures.reused_prompt_tokens > 0)
    std::printf("prefix reuse: %.0f prompt tokens taken from the KV cache instead of prefilled\n",
                figures.reused_prompt_tokens);
  if (figures.drafted_tokens > 0)
    std::printf("speculative decoding (prompt lookup): %.0f draft tokens fed, %.0f kept (%.0f%%)\n",
                figures.drafted_tokens, figures.accepted_draft_tokens,
                100.0 * figures.accepted_draft_tokens / figures.drafted_tokens);
  if (figures.forced_tokens > 0)
    std::printf("jump-forward: %.0f tokens written by the requests' grammars without a draw of their own\n",
                figures.forced_tokens);
  std::printf("matmul weights read per decode step: %.1f MiB per device; whole generation %.3f s\n",
              table.max("matmul weights MiB"), table.max("generation s"));
  for (int64_t r = 0; r < std::min<int64_t>(outputs.n, 8); ++r)
    std::printf("request %lld: %s\n", static_cast<long long>(r), request_line(outputs, r, tokenizer).c_str());
  if (outputs.n > 8) std::printf("... (%lld requests in all)\n", static_cast<long long>(outputs.n));
}

void write_output_file(const LlmJobConfig& c, const std::string& weights, const JobRequests& job,
                       const JobFigures& figures, const JobOutputs& o) {
  const int64_t n = o.n, longest_output = o.longest_output, produced = o.produced, vocab = o.vocab;
  io::Hdf5Writer w(c.output);
  std::vector<int32_t> trimmed;
  for (int64_t r = 0; r < n; ++r)
    trimmed.insert(trimmed.end(), o.tokens.begin() + r * longest_output, o.tokens.begin() + r * longest_output + produced);
  w.create_dataset("tokens", {n, produced}, io::StoredType::INT32);
  w.write_rows("tokens", 0, std::span<const int32_t>(trimmed));
  if (c.save_logits) {
    std::vector<float> kept;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t t = 0; t < produced; ++t) {
        const float* row = o.logits.data() + (r * longest_output + t) * vocab;
        const bool generated = o.tokens[r * longest_output + t] >= 0;
        for (int64_t v = 0; v < vocab; ++v) kept.push_back(generated ? row[v] : 0.0f);
      }
    w.create_dataset("logits", {n, produced, vocab}, io::StoredType::FLOAT32);
    w.write_rows("logits", 0, std::span<const float>(kept));
  }
  if (!o.completions.empty()) w.write_strings("text", o.completions);
  if (!job.prompt_texts.empty()) w.write_strings("prompts", job.prompt_texts);
  const RankTable& table = figures.table;
  for (const auto& [name, value] : io::Attributes{
           {"mesh", c.mesh.to_string()},
           {"mode", std::string(to_string(c.mode))},
           {"weights", weights},
           {"weight_dtype", std::string(to_string(c.model.weight_dtype))},
           {"act_dtype", std::string(to_string(c.model.act_dtype))},
           {"kv_dtype", std::string(to_string(c.kv_dtype))},
           {"sampling", std::string(serving::to_string(c.sampling.mode))},
           {"temperature", c.sampling.temperature},
           {"top_k", c.sampling.top_k},
           {"top_p", c.sampling.top_p},
           {"seed", static_cast<int64_t>(c.sampling.seed)},
           {"presence_penalty", c.penalties.presence},
           {"frequency_penalty", c.penalties.frequency},
           {"repetition_penalty", c.penalties.repetition},
           {"max_batch", c.max_batch},
           {"prefill_seconds", table.max("prefill s")},
           {"decode_ms_per_step", table.max("decode ms/step")},
           {"decode_tokens_per_second", figures.decode_tokens_per_s}})
    w.set_attribute(name, value);
  w.commit();
  std::printf("wrote %s\n", c.output.c_str());
}

void write_json_record(const LlmJobConfig& c, const LlamaConfig& config, int ranks, const JobFigures& figures,
                       const JobOutputs& outputs) {
  const RankTable& table = figures.table;
  const nlohmann::ordered_json record = {
      {"ranks", ranks},
      {"mesh", c.mesh.to_string()},
      {"mode", to_string(c.mode)},
      {"weight_dtype", to_string(c.model.weight_dtype)},
      {"act_dtype", to_string(c.model.act_dtype)},
      {"kv_dtype", to_string(c.kv_dtype)},
      {"requests", outputs.n},
      {"max_batch", c.max_batch},
      {"layers", config.num_hidden_layers},
      {"hidden", config.hidden_size},
      {"load_s", table.max("load s")},
      {"warm_up_s", table.max("warm-up s")},
      {"prefill_s", table.max("prefill s")},
      {"prefill_tokens_per_s", figures.prefill_tokens_per_s},
      {"reused_prompt_tokens", figures.reused_prompt_tokens},
      {"prefill_matmul_s", table.max("prefill mm s")},
      {"prefill_comm_s", table.max("prefill comm s")},
      {"mean_ttft_s", table.max("mean TTFT s")},
      {"decode_ms_per_step", table.max("decode ms/step")},
      {"decode_matmul_ms_per_step", table.max("matmul ms/step")},
      {"decode_comm_ms_per_step", table.max("comm ms/step")},
      {"decode_tokens_per_s", figures.decode_tokens_per_s},
      {"matmul_weight_bytes", table.max("matmul weights MiB") * kMiB},
      {"generated_tokens", outputs.generated},
      {"generation_s", table.max("generation s")},
      {"peak_mib", table.max("peak MiB")},
      {"weights_mib", table.max("weights MiB")},
      {"kv_mib", table.max("KV MiB")},
      {"drafted_tokens", figures.drafted_tokens},
      {"accepted_draft_tokens", figures.accepted_draft_tokens},
      {"forced_tokens", figures.forced_tokens}};
  std::ofstream out(c.json);
  out << record.dump() << '\n';
  if (!out.good()) throw Error(fmt::format("cannot write '{}'", c.json));
}

}  // namespace meshnn::models::llama
