// meshnn-llm: Llama-family inference on a mesh of MPI ranks: prefill, decode with a KV cache,
// continuous batching, sampling on the sharded logits.
//
//   mpirun -np 2 build/apps/meshnn-llm                      # generated TinyLlama-shaped model, 1x2 tp
//   mpirun -np 4 build/apps/meshnn-llm --mesh 2x2 --mode hybrid --weights model.h5 --tokens prompts.h5 --output out.h5
//   mpirun -np 2 build/apps/meshnn-llm --weights converted.h5 --prompt "The capital of France is"
#include <algorithm>
#include <string_view>

#include "meshnn/models/llama/llm_job.hpp"
#include "meshnn/runtime/cli.hpp"

using namespace meshnn;

namespace {

constexpr int64_t kInteractiveMaxNewTokens = 512;

models::llama::LlmJobConfig parse(int argc, char** argv, int world_size) {
  models::llama::LlmJobConfig c;
  std::string mesh, submesh, mode = "tp", weight_dtype = "bfloat8_b", act_dtype = "bfloat16", kv_dtype = "bfloat16";
  std::string topology = "ring", sampling = "greedy";
  CLI::App cli("Llama-family LLM inference (prefill + decode with a KV cache) on a mesh of MPI ranks.", "meshnn-llm");
  cli.add_option("--weights", c.weights,
                 "Llama weights (HDF5, Hugging Face names; default: a generated --preset model, made once)")
      ->type_name("FILE");
  cli.add_option("--preset", c.preset, "generated model")->check(CLI::IsMember(models::llama::llama_preset_names()));
  cli.add_option("--layers", c.layers, "generated model: number of layers (0 = the preset's)")
      ->transform(IntRange(0, 1000));
  cli.add_option("--mesh", mesh, "mesh shape; rows*cols must equal the number of ranks (default: 1 x ranks)")
      ->type_name("RxC")
      ->check(parsed_by(parse_mesh_shape));
  cli.add_option("--mode", mode, "how the model spreads over the mesh")
      ->check(CLI::IsMember({"tp", "2d", "dp", "hybrid"}));
  cli.add_option("--submesh", submesh, "hybrid: shape of each tensor-parallel replica (default: one mesh row)")
      ->type_name("RxC")
      ->check(parsed_by(parse_mesh_shape));
  cli.add_option("--weight-dtype", weight_dtype, "element type of the weights")
      ->check(CLI::IsMember({"bfloat8_b", "bfloat4_b", "bfloat16", "float32"}));
  cli.add_option("--act-dtype", act_dtype, "element type of the activations")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  cli.add_option("--kv-dtype", kv_dtype, "element type of the KV cache")
      ->check(CLI::IsMember({"bfloat16", "bfloat8_b", "float32"}));
  cli.add_option("--tokens", c.tokens, "prompts: dataset tokens [batch, seq] (+ prompt_lengths, max_new_tokens)")
      ->type_name("FILE");
  cli.add_option("--prompt", c.prompts, "a text prompt, tokenized with the model's tokenizer (repeatable)")
      ->type_name("TEXT")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cli.add_option("--prompts", c.prompts_file,
                 "text prompts, one JSON object per line: {\"prompt\": \"...\", \"max_tokens\": N}, or "
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]} for the chat template")
      ->type_name("FILE");
  CLI::Option* json_schema = cli.add_option("--json-schema", c.json_schema_file,
                                            "each text prompt's answer is JSON following this JSON Schema (the "
                                            "server's response_format json_schema; docs/serving.md)")
                                 ->type_name("FILE");
  CLI::Option* json_object = cli.add_flag("--json-object", c.json_object,
                                          "each text prompt's answer is a JSON object (response_format json_object)");
  json_schema->excludes(json_object);
  cli.add_flag("--chat", c.chat,
               "apply the model's chat template: each --prompt (and each \"prompt\" of --prompts) is a user message");
  CLI::Option* system = cli.add_option("--system", c.system_prompt,
                                       "with --chat or --interactive: a system message before the user's")
                            ->type_name("TEXT");
  cli.add_option("--chat-template", c.chat_template_file,
                 "a Jinja chat template to use instead of the model's (e.g. for a base model), with --chat or "
                 "\"messages\"")
      ->type_name("FILE");
  cli.add_option("--chat-template-kwargs", c.chat_template_kwargs,
                 "variables for the chat template as a JSON object, e.g. '{\"enable_thinking\": false}' (Qwen3); "
                 "--serve: the defaults a request's chat_template_kwargs add to")
      ->type_name("JSON");
  CLI::Option* interactive =
      cli.add_flag("--interactive", c.interactive,
                   "chat with the model: type a message per line on stdin (world rank 0's), end with Ctrl-D; the "
                   "answers stream back through the chat template's conversation");
  CLI::Option* serve =
      cli.add_flag("--serve", c.serve,
                   "an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions) on world rank 0 until "
                   "Ctrl-C: clients' requests join the running batch as they arrive");
  cli.add_option("--host", c.host, "--serve: the address to listen on (0.0.0.0: every interface)")->needs(serve);
  cli.add_option("--port", c.port, "--serve: the port (0: any free one; default 8000)")
      ->transform(IntRange(0, 65535))
      ->needs(serve);
  cli.add_option("--port-file", c.port_file, "--serve: write the port to FILE once the server listens")
      ->type_name("FILE")
      ->needs(serve);
  cli.add_option("--reasoning-parser", c.reasoning_parser,
                 "--serve: show a chat answer's <think>...</think> apart, as reasoning_content (qwen3: when the "
                 "answer opens with <think>; deepseek_r1: the answer opens inside its reasoning)")
      ->check(CLI::IsMember({"qwen3", "deepseek_r1"}))
      ->needs(serve);
  cli.add_option("--tool-call-parser", c.tool_call_parser,
                 "--serve: parse the tool calls of chat answers to requests with tools into tool_calls (hermes: "
                 "<tool_call>{...}</tool_call> blocks of Hermes, Qwen2.5, Qwen3; llama3_json: Llama 3.1-3.3's "
                 "{\"name\": ..., \"parameters\": ...} answers)")
      ->check(CLI::IsMember({"hermes", "llama3_json"}))
      ->needs(serve);
  cli.add_option("--served-model-name", c.served_model_name,
                 "--serve: the model's name in /v1/models (default: the weights file's name)")
      ->needs(serve);
  bool no_prefix_reuse = false;
  cli.add_flag("--no-prefix-reuse", no_prefix_reuse,
               "prefill every prompt whole (the batch job and --serve), instead of taking its start from the KV "
               "cache where another request holds it")
      ->excludes(interactive);
  CLI::Option* max_context =
      cli.add_option("--max-context", c.max_context,
                     "--interactive and --serve: positions a conversation or request may fill (default: "
                     "max_position_embeddings, at most 8192)")
          ->transform(IntRange(1, 1 << 24));
  cli.add_option("--transcript", c.transcript,
                 "--interactive: append each turn to FILE as a JSON line (the conversation so far and the answer's "
                 "token ids)")
      ->type_name("FILE")
      ->needs(interactive);
  cli.add_option("--rope-scaling", c.rope_scaling,
                 "replace the weights file's rope_scaling with this config.json object, e.g. '{\"rope_type\": \"yarn\", "
                 "\"factor\": 4.0, \"original_max_position_embeddings\": 32768}' (Qwen3's long context); "
                 "'{\"rope_type\": \"default\"}' for none")
      ->type_name("JSON");
  cli.add_option("--tokenizer", c.tokenizer,
                 "tokenizer.model, tokenizer.json or a model directory (default: the one in the weights file)")
      ->type_name("PATH");
  bool no_stream = false, no_warm_up = false;
  cli.add_flag("--no-stream", no_stream, "do not print the first request's text as it is generated");
  cli.add_option("--prompt-len", c.prompt_len, "generated prompts: tokens per prompt")->transform(IntRange(1, 1 << 20));
  cli.add_option("--batch", c.batch, "generated prompts: number of requests")->transform(IntRange(1, 1 << 20));
  CLI::Option* max_new_tokens =
      cli.add_option("--max-new-tokens", c.max_new_tokens,
                     "tokens to generate per request (unless the tokens file says; default 32, 512 per --interactive "
                     "turn)")
          ->transform(IntRange(1, 1 << 20));
  cli.add_option("--max-batch", c.max_batch, "decode slots per replica (continuous batching beyond them)")
      ->transform(IntRange(1, 1 << 16));
  cli.add_option("--prefill-chunk", c.prefill_chunk,
                 "tokens per prefill pass: prompts admitted together share passes, long ones span several")
      ->transform(IntRange(1, 1 << 20));
  cli.add_option("--sampling", sampling, "greedy | top-k | top-p")->check(parsed_by(serving::parse_sampling_mode));
  cli.add_option("--temperature", c.sampling.temperature, "sampling temperature (top-k, top-p)")->check(FiniteRange());
  cli.add_option("--top-k", c.sampling.top_k, "top-k: tokens kept; top-p: cut to K first (0 = no cut)")
      ->transform(IntRange(0, 1 << 24));
  cli.add_option("--top-p", c.sampling.top_p, "top-p: probability mass kept, in (0, 1]")->check(FiniteRange());
  cli.add_option("--presence-penalty", c.penalties.presence,
                 "subtracted from the logit of every token generated so far, in [-2, 2] (OpenAI's presence_penalty)")
      ->check(FiniteRange());
  cli.add_option("--frequency-penalty", c.penalties.frequency,
                 "subtracted from a token's logit once per time it was generated, in [-2, 2] (OpenAI's "
                 "frequency_penalty)")
      ->check(FiniteRange());
  cli.add_option("--repetition-penalty", c.penalties.repetition,
                 "a token of the prompt or the answer has its logit divided by this when positive, multiplied when "
                 "negative; > 1 discourages repeats (Hugging Face's repetition_penalty)")
      ->check(FiniteRange());
  cli.add_option("--draft-tokens", c.draft_tokens,
                 "speculative decoding by prompt lookup: a greedy request whose last tokens appeared before in its "
                 "text feeds up to this many of the tokens that followed them beside its decode row, and keeps those "
                 "the model agrees with (0 = off)")
      ->transform(IntRange(0, 64));
  bool no_jump_forward = false;
  cli.add_flag("--no-jump-forward", no_jump_forward,
               "structured output (--json-schema, response_format, forced tool calls): draw every token, instead of "
               "writing at once what the grammar leaves no choice about (a key's rest, closing brackets) and feeding "
               "it in the next pass");
  std::string generation_config = "auto";
  cli.add_option("--generation-config", generation_config,
                 "auto: the sampling options not given here (--sampling, --temperature, --top-k, --top-p, "
                 "--repetition-penalty) come from the model's generation_config.json, as transformers' generate() "
                 "reads it; none: meshnn's defaults (greedy)")
      ->check(CLI::IsMember({"auto", "none"}));
  cli.add_option("--seed", c.seed, "seed of sampling, of a generated model and of generated prompts")
      ->transform(IntRange(0, INT64_MAX));
  cli.add_flag("--no-warm-up", no_warm_up,
               "skip the untimed warm-up pass: the first request's time to first token then includes making the "
               "passes' buffers");
  cli.add_flag("--ignore-eos", c.ignore_eos,
               "do not stop at eos_token_id (benchmarks: every request makes max-new-tokens)");
  cli.add_option("--output", c.output, "write tokens [batch, T] (and logits) and the run's settings here")
      ->type_name("FILE");
  cli.add_flag("--save-logits", c.save_logits, "also gather and write logits [batch, T, vocab]");
  cli.add_option("--json", c.json, "write one JSON record with the run's figures")->type_name("FILE");
  cli.add_option("--topology", topology, "ring | linear (collective schedule)")->check(parsed_by(parse_topology));
  cli.add_option("--num-links", c.model.num_links, "channels each collective is striped over")
      ->transform(IntRange(1, 8));
  std::string prefill_matmul = "planned";
  cli.add_option("--prefill-matmul", prefill_matmul,
                 "prefill's o_proj and down_proj with their reductions: hand-placed matmul + all_reduce, or planned "
                 "by distributed::matmul (decode steps stay hand-placed)")
      ->check(CLI::IsMember({"hand", "planned"}));
  cli.add_option("--calibration", c.calibration,
                 "cost model for --prefill-matmul planned (meshnn-calibrate's FILE.cost.json; default: the built-in "
                 "one)")
      ->type_name("FILE");
  for (const char* other : {"--prompt", "--prompts", "--tokens", "--output", "--save-logits", "--json", "--batch",
                            "--json-schema", "--json-object"}) {
    interactive->excludes(other);  // CLI11 names them the other way round: "--prompt excludes --interactive"
    serve->excludes(other);
  }
  for (const char* other : {"--interactive", "--chat", "--system"}) serve->excludes(other);
  parse_command_line(cli, argc, argv);
  if (system->count() > 0 && !c.chat && !c.interactive) throw UsageError("--system requires --chat or --interactive");
  if (max_context->count() > 0 && !c.interactive && !c.serve)
    throw UsageError("--max-context applies to --interactive and --serve");
  // A chat answer ends at its eos; 32 tokens would cut most of them short.
  if (c.interactive && max_new_tokens->count() == 0) c.max_new_tokens = kInteractiveMaxNewTokens;
  c.model.planned_prefill = prefill_matmul == "planned";

  // The checks above let through only what these conversions accept.
  c.mesh = mesh.empty() ? MeshShape{1, world_size} : parse_mesh_shape(mesh);
  if (!submesh.empty()) c.submesh = parse_mesh_shape(submesh);
  c.mode = models::parse_parallel_mode(mode);
  if (c.interactive && c.mode != models::ParallelMode::TP && c.mode != models::ParallelMode::TWO_D)
    throw UsageError("--interactive holds one conversation on one model: run it with --mode tp or 2d");
  c.model.weight_dtype = parse_data_type(weight_dtype);
  c.model.act_dtype = parse_data_type(act_dtype);
  c.kv_dtype = parse_data_type(kv_dtype);
  c.model.topology = parse_topology(topology);
  c.sampling.mode = serving::parse_sampling_mode(sampling);
  c.sampling.seed = c.seed;
  c.model_sampling_defaults = generation_config == "auto";
  c.sampling_given = {cli.count("--sampling") > 0, cli.count("--temperature") > 0, cli.count("--top-k") > 0,
                      cli.count("--top-p") > 0, cli.count("--repetition-penalty") > 0};
  c.stream = !no_stream;
  c.prefix_reuse = !no_prefix_reuse;
  c.warm_up = !no_warm_up;
  c.jump_forward = !no_jump_forward;
  try {
    c.sampling.validate();
    c.penalties.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  // MPI's thread support is chosen before the options are parsed: a server relays on a thread of
  // its own where it runs several replicas (server/root_relay.hpp), which needs MULTIPLE. The
  // other jobs keep FUNNELED, whose MPI calls take no lock.
  const bool serving = std::any_of(argv + 1, argv + argc, [](const char* a) {
    return std::string_view(a) == "--serve" || std::string_view(a).starts_with("--serve=");
  });
  return run_app(
      argc, argv,
      [](Runtime& rt, int argc, char** argv) { return models::llama::run_llm_job(parse(argc, argv, rt.world_size())); },
      serving ? MpiThreads::MULTIPLE : MpiThreads::FUNNELED);
}
