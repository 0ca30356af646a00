// meshnn-make-weights: writes a synthetic Falcon MLP weights file (and optionally an activations
// file) in exactly the layout of a converted Hugging Face checkpoint, seeded, any size. One process,
// no MPI launcher needed.
//
//   build/apps/meshnn-make-weights --output falcon_mlp.h5                 # Falcon-7B MLP size
//   build/apps/meshnn-make-weights --output small.h5 --hidden 256 --intermediate 1024 --storage float32
//   build/apps/meshnn-make-weights --output ckpt.h5 --layers 2 --input input.h5 --batch 2 --seq 128
#include <cstdio>

#include "meshnn/io/synthetic_model.hpp"
#include "meshnn/runtime/options.hpp"

using namespace meshnn;

int main(int argc, char** argv) {
  OptionParser cli("meshnn-make-weights", "Writes a synthetic Falcon MLP weights file (HDF5, Hugging Face key names).");
  cli.add_option("output", "FILE", "weights file to write");
  cli.add_option("hidden", "N", "hidden_size", "4544");
  cli.add_option("intermediate", "N", "intermediate_size", "18176");
  cli.add_option("layers", "N", "0 = a bare MLP block; N = a checkpoint with N layers (transformer.h.{i}.mlp.*)", "0");
  cli.add_option("storage", "TYPE", "element type on disk: float32 or bfloat16", "bfloat16");
  cli.add_option("seed", "N", "seed of the values", "1234");
  cli.add_flag("chunked", "store datasets chunked (64-row chunks)");
  cli.add_option("deflate", "LEVEL", "deflate-compress datasets (1-9; 0 = off)", "0");
  cli.add_option("input", "FILE", "also write an activations file with dataset 'input' [batch, seq, hidden]");
  cli.add_option("batch", "N", "batch of the input", "1");
  cli.add_option("seq", "N", "sequence length of the input", "128");
  try {
    cli.parse(argc, argv);
    io::SyntheticFalconMlp spec;
    const std::string output = cli.get("output");
    spec.hidden_size = cli.get_int("hidden", 1, int64_t{1} << 20);
    spec.intermediate_size = cli.get_int("intermediate", 1, int64_t{1} << 22);
    spec.num_layers = static_cast<int>(cli.get_int("layers", 0, 1024));
    spec.storage = cli.get_choice("storage", {"float32", "bfloat16"}) == "float32" ? io::StoredType::FLOAT32
                                                                                   : io::StoredType::BFLOAT16;
    spec.seed = static_cast<uint64_t>(cli.get_int("seed", 0, INT64_MAX));
    spec.chunked = cli.flag("chunked");
    spec.deflate_level = static_cast<int>(cli.get_int("deflate", 0, 9));
    const int64_t batch = cli.get_int("batch", 1, 1 << 20), seq = cli.get_int("seq", 1, 1 << 24);
    io::write_synthetic_falcon_mlp(output, spec);
    std::printf("wrote %s: Falcon MLP hidden %lld intermediate %lld, %s storage, seed %llu\n", output.c_str(),
                static_cast<long long>(spec.hidden_size), static_cast<long long>(spec.intermediate_size),
                std::string(io::to_string(spec.storage)).c_str(), static_cast<unsigned long long>(spec.seed));
    if (cli.has("input")) {
      io::write_synthetic_input(cli.get("input"), batch, seq, spec.hidden_size, spec.seed);
      std::printf("wrote %s: input [%lld, %lld, %lld] float32\n", cli.get("input").c_str(), static_cast<long long>(batch),
                  static_cast<long long>(seq), static_cast<long long>(spec.hidden_size));
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
