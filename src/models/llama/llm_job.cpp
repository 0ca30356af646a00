#include "meshnn/models/llama/llm_job.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <optional>

#include "llm_job_report.hpp"
#include "meshnn/core/memory.hpp"
#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/distributed/calibrate.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/models/every_rank.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/runtime/memory.hpp"
#include "meshnn/server/serve.hpp"
#include "meshnn/serving/generator.hpp"
#include "meshnn/text/text_stream.hpp"
#include "meshnn/text/utf8.hpp"
#include "chat_session.hpp"
#include "requests.hpp"

namespace meshnn::models::llama {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The options the command line cannot check, then the mesh.
MeshDevicePtr open_mesh(const LlmJobConfig& c) {
  MESHNN_CHECK(c.max_batch >= 1, "--max-batch must be >= 1, got {}", c.max_batch);
  c.sampling.validate();
  c.penalties.validate();
  auto mesh = MeshDevice::open(c.mesh, c.model.topology);
  if (mesh->device_id() == 0) std::printf("%s\n", visualize_mesh_device(*mesh).c_str());
  return mesh;
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
  const MeshShape shape =
      c.mode == ParallelMode::DP ? MeshShape{1, 1} : c.submesh.value_or(MeshShape{1, mesh->num_cols()});
  const auto subs = mesh->create_submeshes(shape);
  return {subs.mine, subs.index, subs.count};
}

JobRequests prepare_requests(const LlmJobConfig& c, const LlamaConfig& config, const std::string& file,
                             const MeshDevice& mesh, std::time_t now) {
  JobRequests job;
  on_every_rank(mesh, "preparing the requests", [&] { job = make_job_requests(c, config, file, now); });
  return job;
}

// --interactive: the positions a conversation may fill, checked before the (long) load.
int64_t conversation_positions(const LlmJobConfig& c, const LlamaConfig& config) {
  if (c.max_context == 0) return std::min(config.max_position_embeddings, LlmJobConfig::kDefaultMaxContext);
  MESHNN_CHECK(c.max_context <= config.max_position_embeddings, "--max-context {} is beyond max_position_embeddings {}",
               c.max_context, config.max_position_embeddings);
  return c.max_context;
}

// The positions a request's cache row needs: its prompt plus its new tokens, for the longest
// request. Checked before the (long) load: the same requests on every rank, so the same error.
int64_t positions_needed(const std::vector<serving::GenerationRequest>& requests, const LlamaConfig& config) {
  int64_t longest = 0;
  for (const auto& r : requests)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens);
  MESHNN_CHECK(longest <= config.max_position_embeddings,
               "a prompt plus its new tokens needs {} positions, beyond max_position_embeddings {}", longest,
               config.max_position_embeddings);
  return longest;
}

// Each rank reads only its shards.
LoadedModel load_model(const LlmJobConfig& c, const std::string& file, const LlamaConfig& config,
                       const MeshDevicePtr& group, int64_t positions) {
  const size_t rss_before = current_rss_bytes();
  const auto start = Clock::now();
  LlamaOptions options = c.model;
  options.max_positions = positions;  // the rotary tables for the positions the cache holds, no more
  options.sharding = c.mode == ParallelMode::TWO_D ? LlamaSharding::TWO_D : LlamaSharding::TENSOR_PARALLEL;
  if (options.planned_prefill && !c.calibration.empty()) options.cost = distributed::load_cost_model(c.calibration);
  LoadedModel loaded{LlamaModel::load(file, config, group, options)};
  release_spare_buffers();  // what loading freed goes back to the system before the KV cache is made
  loaded.seconds = seconds_since(start);
  loaded.growth_bytes = static_cast<double>(peak_rss_bytes() - std::min(peak_rss_bytes(), rss_before));
  return loaded;
}

// Request r goes to replica r % replicas.
std::vector<serving::GenerationRequest> requests_of_replica(const std::vector<serving::GenerationRequest>& requests,
                                                            const Replicas& replicas) {
  std::vector<serving::GenerationRequest> mine;
  for (size_t r = 0; r < requests.size(); ++r)
    if (static_cast<int>(r % replicas.count) == replicas.index) mine.push_back(requests[r]);
  return mine;
}

// One decode slot per request of the replica, up to --max-batch.
serving::KvCache make_cache(const LlmJobConfig& c, const LlamaModel& model, size_t requests, int64_t positions) {
  // A server's requests are not known yet: it gets every slot.
  const int64_t slots =
      c.serve ? c.max_batch : std::max<int64_t>(1, std::min<int64_t>(c.max_batch, static_cast<int64_t>(requests)));
  return model.make_cache(slots, positions, c.kv_dtype);
}

// The planned prefill's o_proj for the pass of the longest prompt (its first one, when it spans
// several), or "" when prefill is not planned. Made on every rank: a shape no plan fits is then the
// same error everywhere, not rank 0's alone while the others enter the first collective.
std::string planned_prefill_description(const LlmJobConfig& c, const JobRequests& job, const LlamaModel& model,
                                        const Replicas& replicas) {
  if (!c.model.planned_prefill || replicas.group->num_devices() == 1) return "";
  int64_t rows = 1;
  for (const auto& r : job.requests) rows = std::max<int64_t>(rows, static_cast<int64_t>(r.prompt.size()));
  rows = std::min(rows, c.prefill_chunk);
  return fmt::format("prefill o_proj of a {}-row pass by distributed::matmul: {}", rows,
                     model.explain_planned_prefill(rows));
}

void print_setup(const LlmJobConfig& c, const JobRequests& job, const LlamaConfig& config, const LlamaModel& model,
                 const serving::KvCache& cache, const Replicas& replicas, const std::string& prefill_plan) {
  const text::Tokenizer* tokenizer = job.text_tokenizer();
  const long long slots = static_cast<long long>(cache.slots());
  if (!job.tokenizer_problem.empty())
    std::printf("warning: no text output: %s\n", job.tokenizer_problem.c_str());
  else if (tokenizer != nullptr)
    std::printf("tokenizer: %s (%s, %lld tokens)\n", job.tokenizer->source.c_str(), tokenizer->kind().c_str(),
                static_cast<long long>(tokenizer->vocab_size()));
  std::printf("%s", model.describe().c_str());
  std::printf("  %-34s %s %s on every device: %lld slots x its %lld KV head(s) x %lld positions\n",
              "KV cache (per layer, K and V)", cache.layer_shape().to_string().c_str(),
              std::string(to_string(c.kv_dtype)).c_str(), slots, static_cast<long long>(model.head_split().kv_heads),
              static_cast<long long>(cache.max_seq()));
  std::printf("  %-34s [users, %lld] float32, Shard(vocab) over the %d device(s) of %s; sampled without gathering\n",
              "logits", static_cast<long long>(config.vocab_size), model.mesh()->num_devices(),
              c.mode == ParallelMode::TWO_D ? "each mesh row" : "each group");
  if (!prefill_plan.empty()) std::printf("%s\n", prefill_plan.c_str());
  if (c.serve)
    std::printf("mode %s: %d replica(s) of a %s group; a server of %lld decode slot(s) per replica\n",
                std::string(to_string(c.mode)).c_str(), replicas.count, replicas.group->shape().to_string().c_str(),
                slots);
  else if (c.interactive)
    std::printf("mode %s: one %s group; one conversation\n", std::string(to_string(c.mode)).c_str(),
                replicas.group->shape().to_string().c_str());
  else
    std::printf("mode %s: %d replica(s) of a %s group; %zu request(s), %lld decode slot(s) per replica\n",
                std::string(to_string(c.mode)).c_str(), replicas.count, replicas.group->shape().to_string().c_str(),
                job.requests.size(), slots);
  std::fflush(stdout);
}

// Prints the replica's first request as it is generated: the prompt now, then (through
// go.on_token) each token's text as soon as it completes a character. `stream` must outlive the
// generation.
void stream_first_request(const JobRequests& job, const serving::GenerationRequest& first,
                          const text::Tokenizer& tokenizer, std::optional<text::TextStream>& stream,
                          serving::GenerationOptions& go) {
  stream.emplace(tokenizer);
  const size_t id = static_cast<size_t>(first.id);
  const std::string prompt =
      job.prompt_texts.empty() ? text::sanitize_utf8(tokenizer.decode(first.prompt)) : job.prompt_texts[id];
  std::printf("\nrequest %zu:\n%s", id, prompt.c_str());
  std::fflush(stdout);
  go.on_token = [&tokenizer, &stream](size_t request, int32_t token, bool last, const serving::TokenLogprobs*) {
    if (request != 0) return;
    std::string piece = stream->push(token);
    if (last) piece += stream->finish() + "\n";
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
}

// What each token of the model's vocabulary writes (nothing past the tokenizer's): what a
// response_format's grammar sees. Every rank needs it, to mask its shard of the vocabulary.
std::shared_ptr<const serving::TokenBytes> token_bytes(const text::Tokenizer& tokenizer, int64_t vocab) {
  return std::make_shared<const serving::TokenBytes>(text::vocabulary_texts(tokenizer, vocab));
}

// The replica's requests to their end; world rank 0 streams the first one's text.
Generation run_generation(const LlmJobConfig& c, const JobRequests& job, const LlamaModel& model,
                          serving::KvCache& cache, const std::vector<serving::GenerationRequest>& mine,
                          MeshDevice& mesh) {
  serving::GenerationOptions go = generation_options(c, job);
  // Requests beginning alike (a system prompt, few-shot examples) prefill their common start once.
  go.reuse_prefixes = c.prefix_reuse;
  const bool structured = std::any_of(job.requests.begin(), job.requests.end(),
                                      [](const serving::GenerationRequest& r) { return r.grammar != nullptr; });
  if (structured) go.token_bytes = token_bytes(*job.text_tokenizer(), model.config().vocab_size);
  std::optional<text::TextStream> stream;
  const text::Tokenizer* tokenizer = job.text_tokenizer();
  if (mesh.device_id() == 0 && tokenizer != nullptr && c.stream && !mine.empty())
    stream_first_request(job, mine.front(), *tokenizer, stream, go);
  double warm_up_seconds = 0;
  if (c.warm_up && !mine.empty()) {
    // The largest passes the generation makes: its first prefill pass and a step of every slot.
    int64_t prompt_tokens = 0;
    for (const auto& r : mine) prompt_tokens += static_cast<int64_t>(r.prompt.size());
    warm_up_seconds =
        serving::warm_up(model, cache, std::min(prompt_tokens, c.prefill_chunk), static_cast<int64_t>(mine.size()));
  }
  mesh.synchronize();
  const auto start = Clock::now();
  Generation generation{serving::generate(model, cache, mine, go)};
  generation.seconds = seconds_since(start);
  generation.warm_up_seconds = warm_up_seconds;
  return generation;
}

// --serve: the OpenAI-compatible server until Ctrl-C. The text side is world rank 0's alone.
void run_server(const LlmJobConfig& c, const JobRequests& job, const LlamaConfig& config, const std::string& file,
                const LlamaModel& model, serving::KvCache& cache, const MeshDevice& mesh, const Replicas& replicas,
                std::time_t now) {
  server::ServeOptions options;
  options.host = c.host;
  options.port = c.port;
  options.port_file = c.port_file;
  options.model_name = c.served_model_name.empty() ? std::filesystem::path(file).stem().string() : c.served_model_name;
  options.default_max_tokens = c.max_new_tokens;
  options.generation = generation_options(c, job);
  options.generation.reuse_prefixes = c.prefix_reuse;
  if (job.text_tokenizer() != nullptr)
    options.generation.token_bytes = token_bytes(*job.text_tokenizer(), config.vocab_size);
  if (!c.reasoning_parser.empty()) options.reasoning_parser = server::reasoning_parser_named(c.reasoning_parser);
  if (!c.tool_call_parser.empty()) options.tool_call_parser = server::tool_call_parser_named(c.tool_call_parser);
  server::ServeText text;
  text.tokenizer = job.text_tokenizer();
  if (job.tokenizer && job.tokenizer->add_bos_token && config.bos_token_id)
    text.bos = static_cast<int32_t>(*config.bos_token_id);
  if (job.chat_template) text.chat_template = &*job.chat_template;
  if (job.tokenizer) text.special_tokens = job.tokenizer->special_tokens;
  text.chat_variables = job.chat_variables;
  text.now = now;
  if (mesh.device_id() == 0 && !job.tokenizer_problem.empty())
    std::printf("note: no text (%s); prompts must be token ids\n", job.tokenizer_problem.c_str());
  if (mesh.device_id() == 0 && !job.chat_template_problem.empty())
    std::printf("note: /v1/chat/completions is off (%s); give a template with --chat-template\n",
                job.chat_template_problem.c_str());
  server::serve(model, cache, mesh, replicas.index, replicas.count, options, text);
}

// The file's config, with --rope-scaling in place of the file's rope_scaling.
LlamaConfig model_config(const LlmJobConfig& c, const std::string& file, const MeshDevicePtr& mesh) {
  io::Attributes attrs = io::read_root_attributes(file, mesh);
  if (c.rope_scaling.empty()) return config_from_attributes(attrs, file);
  attrs["rope_scaling"] = c.rope_scaling;
  return config_from_attributes(attrs, fmt::format("{} with --rope-scaling", file));
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

// The job's settings with the sampling defaults of the model's generation_config.json, which every
// rank reads from the weights file.
LlmJobConfig with_model_sampling(const LlmJobConfig& given, const std::string& file, bool root) {
  LlmJobConfig c = given;
  if (!c.model_sampling_defaults) return c;
  const std::optional<std::string> text = io::read_embedded_file_local(file, "tokenizer/generation_config.json");
  if (!text) return c;
  const std::string where = fmt::format("tokenizer/generation_config.json in {}", file);
  const std::string taken =
      apply_model_sampling(read_model_sampling(*text, where), c.sampling_given, where, c.sampling, c.penalties);
  if (root && !taken.empty())
    std::printf("sampling from the model's generation_config.json: %s (the command line's options win; "
                "--generation-config none ignores the file)\n",
                taken.c_str());
  return c;
}

int run_llm_job(const LlmJobConfig& given) {
  const MeshDevicePtr mesh = open_mesh(given);
  const bool root = mesh->device_id() == 0;
  const std::string file = weights_file(given, *mesh);
  const LlmJobConfig c = with_model_sampling(given, file, root);
  LlamaConfig config = model_config(c, file, mesh);
  // Rank 0's clock: the date a chat template prints is the same on every rank.
  const auto now = static_cast<std::time_t>(root_value(mesh->comm(), static_cast<int64_t>(std::time(nullptr))));
  const JobRequests job = prepare_requests(c, config, file, *mesh, now);
  const int64_t positions =
      c.interactive || c.serve ? conversation_positions(c, config) : positions_needed(job.requests, config);
  select_rope_factors(config, positions);
  const Replicas replicas = make_replicas(c, mesh);

  const LoadedModel loaded = load_model(c, file, config, replicas.group, positions);
  const std::vector<serving::GenerationRequest> mine = requests_of_replica(job.requests, replicas);
  serving::KvCache cache = make_cache(c, loaded.model, mine.size(), positions);
  const std::string prefill_plan = planned_prefill_description(c, job, loaded.model, replicas);
  if (root) print_setup(c, job, config, loaded.model, cache, replicas, prefill_plan);
  if (c.serve) {
    // The passes' buffers are made before the first client's request, not inside its answer.
    if (c.warm_up) serving::warm_up(loaded.model, cache, std::min(c.prefill_chunk, positions), cache.slots());
    run_server(c, job, config, file, loaded.model, cache, *mesh, replicas, now);
    return 0;
  }
  if (c.interactive) {
    // The passes' buffers are made before the user's first turn, not inside its answer.
    if (c.warm_up) serving::warm_up(loaded.model, cache, std::min(c.prefill_chunk, positions), 1);
    if (root) std::printf("interactive: type a message per line; Ctrl-D (end of input) ends the conversation\n");
    run_chat_session(c, job, loaded.model, cache, positions, *mesh, now);
    return 0;
  }
  // In dp and hybrid each replica generates on its own: a failure in one must reach the others
  // here, not leave them waiting for it in the gathers below.
  Generation generation;
  on_every_rank(*mesh, "generating", [&] { generation = run_generation(c, job, loaded.model, cache, mine, *mesh); });

  const bool leader = replicas.group->device_id() == 0;
  const JobFigures figures = gather_job_figures(loaded, cache, generation, leader, mesh->comm());
  const JobOutputs outputs = gather_outputs(c, job, config.vocab_size, mine, generation.result, mesh, replicas.count);
  if (root) print_report(figures, outputs, job.text_tokenizer());
  on_root(*mesh, "writing the results", [&] {
    if (!c.output.empty()) write_output_file(c, file, job, figures, outputs);
    if (!c.json.empty()) write_json_record(c, config, mesh->num_devices(), figures, outputs);
  });
  return 0;
}

}  // namespace meshnn::models::llama
