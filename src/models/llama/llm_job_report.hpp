// The end of an LLM job (llm_job.cpp): the per-rank figures, every request's tokens gathered from
// the replicas that ran them, the printed report, and the output file and JSON record.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "meshnn/models/llama/llm_job.hpp"
#include "meshnn/models/report.hpp"
#include "meshnn/serving/generator.hpp"
#include "requests.hpp"

namespace meshnn::models::llama {

struct LoadedModel {
  LlamaModel model;
  double seconds = 0, growth_bytes = 0;  // loading it on this rank: time, peak memory growth
};

struct Generation {
  serving::GenerationResult result;  // of this replica's requests, in their order
  double seconds = 0;                // the whole generation on this rank
  double warm_up_seconds = 0;        // serving::warm_up before it (not in `seconds`)
};

// The job's figures, the same on every rank.
struct JobFigures {
  RankTable table;  // one row per rank
  // Summed over the replicas, each replica's leader speaking for it.
  double prefill_tokens = 0, prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  double reused_prompt_tokens = 0;  // taken from the KV cache instead of prefilled (prefix reuse)
  double drafted_tokens = 0, accepted_draft_tokens = 0;  // --draft-tokens
  double forced_tokens = 0;  // jump-forward: tokens the grammars wrote without a draw
};

// leader: this rank is device 0 of its replica. Collective over comm.
JobFigures gather_job_figures(const LoadedModel& loaded, const serving::KvCache& cache, const Generation& generation,
                              bool leader, MPI_Comm comm);

// Every request's tokens (and logits), on every rank.
struct JobOutputs {
  int64_t n = 0;               // requests
  int64_t longest_output = 0;  // the largest max_new_tokens: a request's row in `tokens`
  int64_t vocab = 0;
  std::vector<int32_t> tokens;  // [n, longest_output], -1 after a request ended
  std::vector<float> logits;    // --save-logits: [n, longest_output, vocab]
  int64_t produced = 0;         // the longest row any request filled
  int64_t generated = 0;        // tokens of all requests
  std::vector<std::string> completions;  // each request's text, when the job has a tokenizer
};

// mine: the requests this rank's replica ran (request r on replica r % replicas), result its
// outputs. Collective over mesh (meshnn's all_reduce merges the replicas' rows).
JobOutputs gather_outputs(const LlmJobConfig& c, const JobRequests& job, int64_t vocab,
                          const std::vector<serving::GenerationRequest>& mine, const serving::GenerationResult& result,
                          const MeshDevicePtr& mesh, int replicas);

// The rank table, the prefill and decode summary, and the first requests' text or ids (world rank 0).
void print_report(const JobFigures& figures, const JobOutputs& outputs, const text::Tokenizer* tokenizer);

// --output and --json: rank-local, throw meshnn::Error (the caller agrees on it across ranks).
void write_output_file(const LlmJobConfig& c, const std::string& weights, const JobRequests& job,
                       const JobFigures& figures, const JobOutputs& outputs);
void write_json_record(const LlmJobConfig& c, const LlamaConfig& config, int ranks, const JobFigures& figures,
                       const JobOutputs& outputs);

}  // namespace meshnn::models::llama
