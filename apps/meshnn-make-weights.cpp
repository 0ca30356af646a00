// meshnn-make-weights: writes a synthetic Falcon MLP or Llama checkpoint (and optionally an
// activations or prompts file) in exactly the layout of a converted Hugging Face checkpoint, seeded,
// any size. One process, no MPI launcher needed.
//
//   build/apps/meshnn-make-weights --output falcon_mlp.h5                 # Falcon-7B MLP size
//   build/apps/meshnn-make-weights --output small.h5 --hidden 256 --intermediate 1024 --storage float32
//   build/apps/meshnn-make-weights --output ckpt.h5 --layers 2 --input input.h5 --batch 2 --seq 128
//   build/apps/meshnn-make-weights --model llama --preset tiny --output tiny.h5
//   build/apps/meshnn-make-weights --model llama --output tl.h5 --tokens prompts.h5 --batch 4 --prompt-len 16 --ragged
#include <fmt/format.h>

#include <cstdio>

#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/models/falcon/synthetic.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/runtime/options.hpp"

using namespace meshnn;

namespace {

io::StoredType storage_of(const OptionParser& cli) {
  return cli.get_choice("storage", {"float32", "bfloat16"}) == "float32" ? io::StoredType::FLOAT32
                                                                         : io::StoredType::BFLOAT16;
}

void make_falcon(const OptionParser& cli) {
  models::falcon::SyntheticFalconMlp spec;
  const std::string output = cli.get("output");
  spec.hidden_size = cli.get_int("hidden", 1, int64_t{1} << 20);
  spec.intermediate_size = cli.get_int("intermediate", 1, int64_t{1} << 22);
  spec.num_layers = cli.has("layers") ? static_cast<int>(cli.get_int("layers", 0, 1024)) : 0;
  spec.storage = storage_of(cli);
  spec.seed = static_cast<uint64_t>(cli.get_int("seed", 0, INT64_MAX));
  spec.chunked = cli.flag("chunked");
  spec.deflate_level = static_cast<int>(cli.get_int("deflate", 0, 9));
  const int64_t batch = cli.get_int("batch", 1, 1 << 20), seq = cli.get_int("seq", 1, 1 << 24);
  models::falcon::write_synthetic_mlp(output, spec);
  std::printf("wrote %s: Falcon MLP hidden %lld intermediate %lld, %s storage, seed %llu\n", output.c_str(),
              static_cast<long long>(spec.hidden_size), static_cast<long long>(spec.intermediate_size),
              std::string(io::to_string(spec.storage)).c_str(), static_cast<unsigned long long>(spec.seed));
  if (cli.has("input")) {
    io::write_synthetic_input(cli.get("input"), batch, seq, spec.hidden_size, spec.seed);
    std::printf("wrote %s: input [%lld, %lld, %lld] float32\n", cli.get("input").c_str(), static_cast<long long>(batch),
                static_cast<long long>(seq), static_cast<long long>(spec.hidden_size));
  }
}

void make_llama(const OptionParser& cli) {
  models::llama::SyntheticLlama spec;
  const std::string output = cli.get("output"), preset = cli.get("preset");
  spec.config = models::llama::llama_preset(preset);
  if (cli.has("layers")) spec.config.num_hidden_layers = cli.get_int("layers", 1, 1024);
  if (cli.has("vocab")) spec.config.vocab_size = cli.get_int("vocab", 1, int64_t{1} << 24);
  spec.config.tie_word_embeddings = cli.flag("tie");
  // A smaller vocabulary than the preset's may no longer hold its bos/eos ids.
  for (auto* id : {&spec.config.bos_token_id, &spec.config.eos_token_id})
    if (*id && **id >= spec.config.vocab_size) id->reset();
  spec.storage = storage_of(cli);
  spec.seed = static_cast<uint64_t>(cli.get_int("seed", 0, INT64_MAX));
  spec.chunked = cli.flag("chunked");
  spec.deflate_level = static_cast<int>(cli.get_int("deflate", 0, 9));
  const int64_t batch = cli.get_int("batch", 1, 1 << 20);
  const int64_t prompt_len = cli.has("tokens") ? cli.get_int("prompt-len", 1, 1 << 24) : 0;
  if (cli.flag("ragged") && !cli.has("tokens")) throw UsageError("--ragged needs --tokens");
  if (cli.has("input")) throw UsageError("--input is for --model falcon; a Llama job reads --tokens");

  models::llama::write_synthetic_llama(output, spec);
  const auto& c = spec.config;
  std::printf("wrote %s: Llama (%s) %lld layers, hidden %lld, intermediate %lld, heads %lld/%lld of %lld, vocab %lld%s, "
              "%s storage, seed %llu\n",
              output.c_str(), preset.c_str(), static_cast<long long>(c.num_hidden_layers),
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
              static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
              static_cast<long long>(c.head_dim), static_cast<long long>(c.vocab_size),
              c.tie_word_embeddings ? " (tied)" : "", std::string(io::to_string(spec.storage)).c_str(),
              static_cast<unsigned long long>(spec.seed));
  if (cli.has("tokens")) {
    const bool ragged = cli.flag("ragged");
    const int64_t new_tokens = cli.has("max-new-tokens") ? cli.get_int("max-new-tokens", 1, 1 << 20) : 0;
    models::llama::write_synthetic_tokens(cli.get("tokens"), batch, prompt_len, c.vocab_size, ragged, spec.seed,
                                          new_tokens);
    std::printf("wrote %s: tokens [%lld, %lld] int32%s%s\n", cli.get("tokens").c_str(), static_cast<long long>(batch),
                static_cast<long long>(prompt_len), ragged ? " + prompt_lengths" : "",
                new_tokens > 0 ? " + max_new_tokens" : "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  OptionParser cli("meshnn-make-weights",
                   "Writes a synthetic Falcon MLP or Llama checkpoint (HDF5, Hugging Face key names).");
  cli.add_option("output", "FILE", "weights file to write");
  cli.add_option("model", "NAME", "falcon (an MLP block or checkpoint) or llama (LlamaForCausalLM)", "falcon");
  cli.add_option("hidden", "N", "falcon: hidden_size", "4544");
  cli.add_option("intermediate", "N", "falcon: intermediate_size", "18176");
  cli.add_option("layers", "N",
                 "falcon: 0 = a bare MLP block (default), N = a checkpoint with N layers (transformer.h.{i}.mlp.*); "
                 "llama: num_hidden_layers (default: the preset's)");
  cli.add_option("preset", "NAME", "llama: tiny, tinyllama or llama3-8b", "tinyllama");
  cli.add_option("vocab", "N", "llama: vocab_size (default: the preset's)");
  cli.add_flag("tie", "llama: tie_word_embeddings (no lm_head.weight; the embedding is the LM head)");
  cli.add_option("storage", "TYPE", "element type on disk: float32 or bfloat16", "bfloat16");
  cli.add_option("seed", "N", "seed of the values", "1234");
  cli.add_flag("chunked", "store datasets chunked (64-row chunks)");
  cli.add_option("deflate", "LEVEL", "deflate-compress datasets (1-9; 0 = off)", "0");
  cli.add_option("input", "FILE", "falcon: also write an activations file with dataset 'input' [batch, seq, hidden]");
  cli.add_option("batch", "N", "batch of the input or tokens file", "1");
  cli.add_option("seq", "N", "falcon: sequence length of the input", "128");
  cli.add_option("tokens", "FILE", "llama: also write a prompts file with dataset 'tokens' int32 [batch, prompt-len]");
  cli.add_option("prompt-len", "N", "llama: prompt length of the tokens file", "32");
  cli.add_flag("ragged", "llama: seeded prompt lengths in [1, prompt-len] (dataset 'prompt_lengths'; the last is full)");
  cli.add_option("max-new-tokens", "N", "llama: also dataset 'max_new_tokens', seeded in [1, N] (the last is N)");
  try {
    cli.parse(argc, argv);
    if (cli.get_choice("model", {"falcon", "llama"}) == "llama") {
      make_llama(cli);
    } else {
      for (const char* name : {"vocab", "tokens", "max-new-tokens"})
        if (cli.has(name)) throw UsageError(fmt::format("--{} is for --model llama", name));
      if (cli.flag("tie") || cli.flag("ragged")) throw UsageError("--tie and --ragged are for --model llama");
      make_falcon(cli);
    }
    return 0;
  } catch (const HelpRequested& e) {
    std::printf("%s", e.what());
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "meshnn-make-weights: usage error: %s\n", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "meshnn-make-weights: error: %s\n", e.what());
    return kExitError;
  }
}
