// meshnn-convert: a Hugging Face model directory (config.json, safetensors weights, tokenizer
// files) -> one self-contained meshnn HDF5 file (docs/converting.md). One process, no MPI launcher.
//
//   build/apps/meshnn-convert ~/models/TinyLlama-1.1B-Chat-v1.0 tinyllama.h5
//   build/apps/meshnn-convert --dtype bfloat16 ~/models/falcon-7b falcon7b.h5
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <string>

#include "meshnn/models/hf_convert.hpp"
#include "meshnn/runtime/cli.hpp"

using namespace meshnn;

namespace {

int convert_main(int argc, char** argv) {
  std::string model_dir, output, dtype = "keep";
  int64_t block_bytes = int64_t{16} << 20;
  bool quiet = false;
  CLI::App cli("Converts the Hugging Face model directory MODEL_DIR (" + models::accepted_architectures() +
                   ";\nsafetensors weights) to one meshnn HDF5 file, OUTPUT.h5, that also carries the tokenizer "
                   "files\n(docs/converting.md).",
               "meshnn-convert");
  cli.add_option("MODEL_DIR", model_dir, "Hugging Face model directory")->required();
  cli.add_option("OUTPUT.h5", output, "meshnn HDF5 file to write")->required();
  cli.add_option("--dtype", dtype, "storage type of the weights: keep (as in the checkpoint), float32 or bfloat16")
      ->check(CLI::IsMember({"keep", "float32", "bfloat16"}));
  cli.add_option("--block-size", block_bytes, "bytes of a tensor read and written at a time; about the memory the "
                 "conversion needs")
      ->transform(SizeRange(1, int64_t{1} << 40))
      ->default_str("16M");
  cli.add_flag("--quiet", quiet, "print nothing on success");
  parse_command_line(cli, argc, argv);

  models::ConvertOptions convert;
  if (dtype != "keep") convert.dtype = dtype == "float32" ? io::StoredType::FLOAT32 : io::StoredType::BFLOAT16;
  convert.block_bytes = static_cast<size_t>(block_bytes);
  const models::ConvertSummary s = models::convert_hf_checkpoint(model_dir, output, convert);
  for (const std::string& w : s.warnings) std::fprintf(stderr, "meshnn-convert: note: %s\n", w.c_str());
  if (!quiet) {
    const double mb = static_cast<double>(s.bytes_read) / 1e6;
    std::printf("wrote %s: %s, %lld tensors from %zu safetensors file(s), %.1f MB read, %.1f MB written (%s), "
                "%.2f s, %.1f MB/s\n",
                output.c_str(), s.architecture.c_str(), static_cast<long long>(s.tensors), s.shards.size(), mb,
                static_cast<double>(s.bytes_written) / 1e6, dtype == "keep" ? "dtypes as stored" : dtype.c_str(),
                s.seconds, s.seconds > 0 ? mb / s.seconds : 0.0);
    std::printf("tokenizer/: %s\n", s.tokenizer_files.empty() ? "(no tokenizer files found)"
                                                               : fmt::format("{}", fmt::join(s.tokenizer_files, ", ")).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool("meshnn-convert", argc, argv, convert_main); }
