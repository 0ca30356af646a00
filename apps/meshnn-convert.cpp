// meshnn-convert: a Hugging Face model directory (config.json, safetensors weights, tokenizer
// files) -> one self-contained meshnn HDF5 file (docs/converting.md). One process, no MPI launcher.
//
//   build/apps/meshnn-convert ~/models/TinyLlama-1.1B-Chat-v1.0 tinyllama.h5
//   build/apps/meshnn-convert --dtype bfloat16 ~/models/falcon-7b falcon7b.h5
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <string>
#include <vector>

#include "meshnn/io/hf_convert.hpp"
#include "meshnn/runtime/options.hpp"

using namespace meshnn;

int main(int argc, char** argv) {
  OptionParser cli("meshnn-convert",
                   "arguments: MODEL_DIR OUTPUT.h5\n"
                   "Converts the Hugging Face model directory MODEL_DIR (LlamaForCausalLM, MistralForCausalLM,\n"
                   "FalconForCausalLM, RWForCausalLM; safetensors weights) to one meshnn HDF5 file, OUTPUT.h5, that\n"
                   "also carries the tokenizer files (docs/converting.md).");
  cli.add_option("dtype", "TYPE", "storage type of the weights: keep (as in the checkpoint), float32 or bfloat16", "keep");
  cli.add_option("block-size", "BYTES", "bytes of a tensor read and written at a time (K/M/G suffixes); about the "
                 "memory the conversion needs", "16M");
  cli.add_flag("quiet", "print nothing on success");
  try {
    // The two positional arguments are taken out here; the rest are options.
    std::vector<char*> options{argv[0]};
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--", 0) == 0) {
        options.push_back(argv[i]);
        if ((arg == "--dtype" || arg == "--block-size") && i + 1 < argc) options.push_back(argv[++i]);
      } else {
        positional.emplace_back(arg);
      }
    }
    cli.parse(static_cast<int>(options.size()), options.data());
    if (positional.size() != 2)
      throw UsageError(fmt::format("expected MODEL_DIR and OUTPUT.h5, got {} argument(s) (see --help)", positional.size()));
    io::ConvertOptions convert;
    const std::string dtype = cli.get_choice("dtype", {"keep", "float32", "bfloat16"});
    if (dtype != "keep") convert.dtype = dtype == "float32" ? io::StoredType::FLOAT32 : io::StoredType::BFLOAT16;
    convert.block_bytes = static_cast<size_t>(cli.get_int("block-size", 1, int64_t{1} << 40, /*suffixes=*/true));
    const io::ConvertSummary s = io::convert_hf_checkpoint(positional[0], positional[1], convert);
    for (const std::string& w : s.warnings) std::fprintf(stderr, "meshnn-convert: note: %s\n", w.c_str());
    if (!cli.flag("quiet")) {
      const double mb = static_cast<double>(s.bytes_read) / 1e6;
      std::printf("wrote %s: %s, %lld tensors from %zu safetensors file(s), %.1f MB read, %.1f MB written (%s), "
                  "%.2f s, %.1f MB/s\n",
                  positional[1].c_str(), s.architecture.c_str(), static_cast<long long>(s.tensors), s.shards.size(), mb,
                  static_cast<double>(s.bytes_written) / 1e6, dtype == "keep" ? "dtypes as stored" : dtype.c_str(),
                  s.seconds, s.seconds > 0 ? mb / s.seconds : 0.0);
      std::printf("tokenizer/: %s\n", s.tokenizer_files.empty() ? "(no tokenizer files found)"
                                                                 : fmt::format("{}", fmt::join(s.tokenizer_files, ", ")).c_str());
    }
    return 0;
  } catch (const HelpRequested& e) {
    std::printf("%s", e.what());
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "meshnn-convert: usage error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {  // meshnn::Error, and filesystem errors (permissions)
    std::fprintf(stderr, "meshnn-convert: error: %s\n", e.what());
    return kExitError;
  }
}
