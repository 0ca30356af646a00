// The whole library through meshnn::meshnn: the LLM job is on the top layer, so linking this takes
// every component and every library the installed package names for them (HDF5, SentencePiece,
// PCRE2, hwloc). Built, not run, by tests/system/installed_package.sh.
#include "meshnn/models/llama/llm_job.hpp"
#include "meshnn/runtime/app.hpp"

int main(int argc, char** argv) {
  return meshnn::run_app(argc, argv, [](meshnn::Runtime&, int, char**) {
    return meshnn::models::llama::run_llm_job(meshnn::models::llama::LlmJobConfig{});
  });
}
