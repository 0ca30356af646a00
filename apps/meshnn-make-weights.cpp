// meshnn-make-weights: writes a synthetic Falcon MLP or Llama checkpoint (and optionally an
// activations or prompts file) in exactly the layout of a converted Hugging Face checkpoint, seeded,
// any size. One process, no MPI launcher needed.
//
//   build/apps/meshnn-make-weights --output falcon_mlp.h5                 # Falcon-7B MLP size
//   build/apps/meshnn-make-weights --output small.h5 --hidden 256 --intermediate 1024 --storage float32
//   build/apps/meshnn-make-weights --output ckpt.h5 --layers 2 --input input.h5 --batch 2 --seq 128
//   build/apps/meshnn-make-weights --model llama --preset tiny --output tiny.h5
//   build/apps/meshnn-make-weights --model llama --output tl.h5 --tokens prompts.h5 --batch 4 --prompt-len 16 --ragged
#include <cstdio>
#include <optional>

#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/models/falcon/synthetic.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/runtime/cli.hpp"

using namespace meshnn;

namespace {

// The command line; an empty file name or an unset optional is an option not given.
struct Args {
  std::string output, model = "falcon", preset = "tinyllama", storage = "bfloat16", input, tokens;
  int64_t hidden = 4544, intermediate = 18176, batch = 1, seq = 128, prompt_len = 32;
  std::optional<int64_t> layers, vocab, max_new_tokens;
  uint64_t seed = 1234;
  int deflate = 0;
  bool tie = false, chunked = false, ragged = false;

  io::StoredType stored_type() const { return storage == "float32" ? io::StoredType::FLOAT32 : io::StoredType::BFLOAT16; }
};

void make_falcon(const Args& a) {
  if (a.vocab || !a.tokens.empty() || a.max_new_tokens)
    throw UsageError("--vocab, --tokens and --max-new-tokens are for --model llama");
  if (a.tie || a.ragged) throw UsageError("--tie and --ragged are for --model llama");
  models::falcon::SyntheticFalconMlp spec;
  spec.hidden_size = a.hidden;
  spec.intermediate_size = a.intermediate;
  spec.num_layers = static_cast<int>(a.layers.value_or(0));
  spec.storage = a.stored_type();
  spec.seed = a.seed;
  spec.chunked = a.chunked;
  spec.deflate_level = a.deflate;
  models::falcon::write_synthetic_mlp(a.output, spec);
  std::printf("wrote %s: Falcon MLP hidden %lld intermediate %lld, %s storage, seed %llu\n", a.output.c_str(),
              static_cast<long long>(spec.hidden_size), static_cast<long long>(spec.intermediate_size),
              std::string(io::to_string(spec.storage)).c_str(), static_cast<unsigned long long>(spec.seed));
  if (!a.input.empty()) {
    io::write_synthetic_input(a.input, a.batch, a.seq, spec.hidden_size, spec.seed);
    std::printf("wrote %s: input [%lld, %lld, %lld] float32\n", a.input.c_str(), static_cast<long long>(a.batch),
                static_cast<long long>(a.seq), static_cast<long long>(spec.hidden_size));
  }
}

void make_llama(const Args& a) {
  if (a.layers == 0) throw UsageError("--layers: a Llama model needs at least 1 layer");
  if (a.ragged && a.tokens.empty()) throw UsageError("--ragged needs --tokens");
  if (!a.input.empty()) throw UsageError("--input is for --model falcon; a Llama job reads --tokens");
  models::llama::SyntheticLlama spec;
  spec.config = models::llama::llama_preset(a.preset);
  if (a.layers) spec.config.num_hidden_layers = *a.layers;
  if (a.vocab) spec.config.vocab_size = *a.vocab;
  spec.config.tie_word_embeddings = a.tie;
  // A smaller vocabulary than the preset's may no longer hold its bos/eos ids.
  for (auto* id : {&spec.config.bos_token_id, &spec.config.eos_token_id})
    if (*id && **id >= spec.config.vocab_size) id->reset();
  spec.storage = a.stored_type();
  spec.seed = a.seed;
  spec.chunked = a.chunked;
  spec.deflate_level = a.deflate;

  models::llama::write_synthetic_llama(a.output, spec);
  const auto& c = spec.config;
  std::printf("wrote %s: Llama (%s) %lld layers, hidden %lld, intermediate %lld, heads %lld/%lld of %lld, vocab %lld%s, "
              "%s storage, seed %llu\n",
              a.output.c_str(), a.preset.c_str(), static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
              static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size),
              c.tie_word_embeddings ? " (tied)" : "", std::string(io::to_string(spec.storage)).c_str(),
              static_cast<unsigned long long>(spec.seed));
  if (!a.tokens.empty()) {
    const int64_t new_tokens = a.max_new_tokens.value_or(0);
    models::llama::write_synthetic_tokens(a.tokens, a.batch, a.prompt_len, c.vocab_size, a.ragged, spec.seed,
                                          new_tokens);
    std::printf("wrote %s: tokens [%lld, %lld] int32%s%s\n", a.tokens.c_str(), static_cast<long long>(a.batch),
                static_cast<long long>(a.prompt_len), a.ragged ? " + prompt_lengths" : "",
                new_tokens > 0 ? " + max_new_tokens" : "");
  }
}

int make_weights_main(int argc, char** argv) {
  Args a;
  CLI::App cli("Writes a synthetic Falcon MLP or Llama checkpoint (HDF5, Hugging Face key names).",
               "meshnn-make-weights");
  cli.add_option("--output", a.output, "weights file to write")->type_name("FILE")->required();
  cli.add_option("--model", a.model, "falcon (an MLP block or checkpoint) or llama (LlamaForCausalLM)")
      ->check(CLI::IsMember({"falcon", "llama"}));
  cli.add_option("--hidden", a.hidden, "falcon: hidden_size")->transform(IntRange(1, int64_t{1} << 20));
  cli.add_option("--intermediate", a.intermediate, "falcon: intermediate_size")->transform(IntRange(1, int64_t{1} << 22));
  cli.add_option("--layers", a.layers,
                 "falcon: 0 = a bare MLP block (default), N = a checkpoint with N layers (transformer.h.{i}.mlp.*); "
                 "llama: num_hidden_layers (default: the preset's)")
      ->transform(IntRange(0, 1024));
  cli.add_option("--preset", a.preset, "llama: the model's shape")->check(CLI::IsMember(models::llama::llama_preset_names()));
  cli.add_option("--vocab", a.vocab, "llama: vocab_size (default: the preset's)")->transform(IntRange(1, int64_t{1} << 24));
  cli.add_flag("--tie", a.tie, "llama: tie_word_embeddings (no lm_head.weight; the embedding is the LM head)");
  cli.add_option("--storage", a.storage, "element type on disk")->check(CLI::IsMember({"float32", "bfloat16"}));
  cli.add_option("--seed", a.seed, "seed of the values")->transform(IntRange(0, INT64_MAX));
  cli.add_flag("--chunked", a.chunked, "store datasets chunked (64-row chunks)");
  cli.add_option("--deflate", a.deflate, "deflate-compress datasets (1-9; 0 = off)")->transform(IntRange(0, 9));
  cli.add_option("--input", a.input, "falcon: also write an activations file with dataset 'input' [batch, seq, hidden]")
      ->type_name("FILE");
  cli.add_option("--batch", a.batch, "batch of the input or tokens file")->transform(IntRange(1, 1 << 20));
  cli.add_option("--seq", a.seq, "falcon: sequence length of the input")->transform(IntRange(1, 1 << 24));
  cli.add_option("--tokens", a.tokens, "llama: also write a prompts file with dataset 'tokens' int32 [batch, prompt-len]")
      ->type_name("FILE");
  cli.add_option("--prompt-len", a.prompt_len, "llama: prompt length of the tokens file")->transform(IntRange(1, 1 << 24));
  cli.add_flag("--ragged", a.ragged,
               "llama: seeded prompt lengths in [1, prompt-len] (dataset 'prompt_lengths'; the last is full)");
  cli.add_option("--max-new-tokens", a.max_new_tokens, "llama: also dataset 'max_new_tokens', seeded in [1, N] (the last is N)")
      ->transform(IntRange(1, 1 << 20));
  parse_command_line(cli, argc, argv);
  if (a.model == "llama") make_llama(a);
  else make_falcon(a);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool("meshnn-make-weights", argc, argv, make_weights_main); }
