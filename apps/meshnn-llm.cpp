// meshnn-llm: Llama-family inference on a mesh of MPI ranks: prefill, decode with a KV cache,
// continuous batching, sampling on the sharded logits.
//
//   mpirun -np 2 build/apps/meshnn-llm                      # generated TinyLlama-shaped model, 1x2 tp
//   mpirun -np 4 build/apps/meshnn-llm --mesh 2x2 --mode hybrid --weights model.h5 --tokens prompts.h5 --output out.h5
#include "meshnn/models/llama/llm_job.hpp"
#include "meshnn/runtime/options.hpp"

using namespace meshnn;

namespace {

models::llama::LlmJobConfig parse(int argc, char** argv, int world_size) {
  OptionParser cli("meshnn-llm", "Llama-family LLM inference (prefill + decode with a KV cache) on a mesh of MPI ranks.");
  cli.add_option("weights", "FILE", "Llama weights (HDF5, Hugging Face names; default: a generated --preset model, made once)");
  cli.add_option("preset", "NAME", "generated model: tiny | tinyllama | llama3-8b", "tinyllama");
  cli.add_option("layers", "N", "generated model: number of layers (0 = the preset's)", "0");
  cli.add_option("mesh", "RxC", "mesh shape; rows*cols must equal the number of ranks (default: 1 x ranks)");
  cli.add_option("mode", "MODE", "tp | 2d | dp | hybrid", "tp");
  cli.add_option("submesh", "RxC", "hybrid: shape of each tensor-parallel replica (default: one mesh row)");
  cli.add_option("weight-dtype", "T", "bfloat8_b | bfloat4_b | bfloat16 | float32", "bfloat8_b");
  cli.add_option("act-dtype", "T", "bfloat16 | float32", "bfloat16");
  cli.add_option("kv-dtype", "T", "KV cache: bfloat16 | bfloat8_b | float32", "bfloat16");
  cli.add_option("tokens", "FILE", "prompts: dataset tokens [batch, seq] (+ prompt_lengths, max_new_tokens)");
  cli.add_option("prompt", "TEXT", "a text prompt, tokenized with the model's tokenizer");
  cli.add_option("prompts", "FILE", "text prompts, one JSON object per line: {\"prompt\": \"...\", \"max_tokens\": N}");
  cli.add_option("tokenizer", "PATH", "tokenizer.model, tokenizer.json or a model directory (default: the weights file's)");
  cli.add_flag("no-stream", "do not print the first request's text as it is generated");
  cli.add_option("prompt-len", "L", "generated prompts: tokens per prompt", "128");
  cli.add_option("batch", "B", "generated prompts: number of requests", "1");
  cli.add_option("max-new-tokens", "T", "tokens to generate per request (unless the tokens file says)", "32");
  cli.add_option("max-batch", "K", "decode slots per replica (continuous batching beyond them)", "32");
  cli.add_option("prefill-chunk", "N", "tokens per prefill pass: prompts admitted together share passes, long ones span several", "512");
  cli.add_option("sampling", "MODE", "greedy | top-k | top-p", "greedy");
  cli.add_option("temperature", "X", "sampling temperature (top-k, top-p)", "1.0");
  cli.add_option("top-k", "K", "top-k: tokens kept; top-p: cut to K first (0 = no cut)", "50");
  cli.add_option("top-p", "P", "top-p: probability mass kept, in (0, 1]", "0.9");
  cli.add_option("seed", "N", "seed of sampling, of a generated model and of generated prompts", "1234");
  cli.add_flag("ignore-eos", "do not stop at eos_token_id (benchmarks: every request makes max-new-tokens)");
  cli.add_option("output", "FILE", "write tokens [batch, T] (and logits) and the run's settings here");
  cli.add_flag("save-logits", "also gather and write logits [batch, T, vocab]");
  cli.add_option("json", "FILE", "write one JSON record with the run's figures");
  cli.add_option("topology", "T", "ring | linear (collective schedule)", "ring");
  cli.add_option("num-links", "N", "channels each collective is striped over", "1");
  cli.parse(argc, argv);

  models::llama::LlmJobConfig c;
  try {
    c.mesh = cli.has("mesh") ? parse_mesh_shape(cli.get("mesh")) : MeshShape{1, world_size};
    c.mode = models::parse_parallel_mode(cli.get_choice("mode", {"tp", "2d", "dp", "hybrid"}));
    if (cli.has("submesh")) c.submesh = parse_mesh_shape(cli.get("submesh"));
    c.model.weight_dtype = parse_data_type(cli.get_choice("weight-dtype", {"bfloat8_b", "bfloat4_b", "bfloat16", "float32"}));
    c.model.act_dtype = parse_data_type(cli.get_choice("act-dtype", {"bfloat16", "float32"}));
    c.kv_dtype = parse_data_type(cli.get_choice("kv-dtype", {"bfloat16", "bfloat8_b", "float32"}));
    c.model.topology = parse_topology(cli.get("topology"));
    c.sampling.mode = serving::parse_sampling_mode(cli.get("sampling"));
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  c.model.num_links = static_cast<int>(cli.get_int("num-links", 1, 8));
  c.weights = cli.has("weights") ? cli.get("weights") : "";
  c.preset = cli.get_choice("preset", {"tiny", "tinyllama", "llama3-8b"});
  c.layers = cli.get_int("layers", 0, 1000);
  c.tokens = cli.has("tokens") ? cli.get("tokens") : "";
  if (cli.has("prompt")) c.prompts.push_back(cli.get("prompt"));
  c.prompts_file = cli.has("prompts") ? cli.get("prompts") : "";
  c.tokenizer = cli.has("tokenizer") ? cli.get("tokenizer") : "";
  c.stream = !cli.flag("no-stream");
  c.prompt_len = cli.get_int("prompt-len", 1, 1 << 20);
  c.batch = cli.get_int("batch", 1, 1 << 20);
  c.max_new_tokens = cli.get_int("max-new-tokens", 1, 1 << 20);
  c.max_batch = cli.get_int("max-batch", 0, 1 << 16);
  c.prefill_chunk = cli.get_int("prefill-chunk", 1, 1 << 20);
  c.sampling.temperature = cli.get_double("temperature", -1e30, 1e30);
  c.sampling.top_k = cli.get_int("top-k", 0, 1 << 24);
  c.sampling.top_p = cli.get_double("top-p", -1e30, 1e30);
  c.seed = static_cast<uint64_t>(cli.get_int("seed", 0, INT64_MAX));
  c.sampling.seed = c.seed;
  c.ignore_eos = cli.flag("ignore-eos");
  c.output = cli.has("output") ? cli.get("output") : "";
  c.save_logits = cli.flag("save-logits");
  c.json = cli.has("json") ? cli.get("json") : "";
  try {
    c.sampling.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (c.max_batch < 1) throw UsageError(fmt::format("--max-batch must be >= 1, got {}", c.max_batch));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return run_app(argc, argv, [](Runtime& rt, int argc, char** argv) {
    return models::llama::run_llm_job(parse(argc, argv, rt.world_size()));
  });
}
