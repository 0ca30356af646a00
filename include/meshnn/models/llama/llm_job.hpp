// The LLM inference job behind meshnn-llm: a Llama-family model loaded shard by shard, requests
// prefilled and decoded with a KV cache and continuous batching, tokens sampled on the sharded
// logits, a per-phase report, the generated ids written out. Collective over MPI_COMM_WORLD; every
// error is the same on every rank.
//
// Modes (models/parallel.hpp): tp = one tensor-parallel group over the whole mesh; 2d = the whole
// mesh, hidden over its rows and heads over its columns (model.hpp); dp = every device a replica;
// hybrid = submeshes (default one mesh row each) as replicas, tensor-parallel inside. Requests go
// to replicas round-robin (request r to replica r % replicas).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshnn/models/generation_config.hpp"
#include "meshnn/models/llama/model.hpp"
#include "meshnn/models/parallel.hpp"
#include "meshnn/serving/logit_penalties.hpp"
#include "meshnn/serving/sampler.hpp"

namespace meshnn::models::llama {

struct LlmJobConfig {
  MeshShape mesh{1, 2};
  ParallelMode mode = ParallelMode::TP;
  std::optional<MeshShape> submesh;  // hybrid: each replica's shape (default 1 x mesh cols)
  LlamaOptions model;
  DataType kv_dtype = DataType::BFLOAT16;
  std::string weights;               // empty: a generated model of `preset`, made once and reused
  std::string preset = "tinyllama";
  int64_t layers = 0;                // generated model: num_hidden_layers override (0 = the preset's)
  std::string tokens;                // prompts file (docs/spec/hdf5.md §4); empty: `batch` generated prompts
  std::vector<std::string> prompts;  // text prompts (--prompt), tokenized with the model's tokenizer
  std::string prompts_file;          // JSON lines {"prompt" or "messages": ..., "max_tokens": N} (--prompts)
  // Structured output for every text prompt (a --prompts line's "response_format" overrides it):
  // the answer is JSON following the schema in `json_schema_file`, or any JSON object
  // (`json_object`). serving::GenerationRequest::grammar.
  std::string json_schema_file;
  bool json_object = false;
  // Chat: each text prompt becomes a user message (after `system_prompt`, when given) rendered by
  // the model's chat template, or by `chat_template_file`'s; --prompts lines with "messages" are
  // rendered whether or not `chat` is set. The rendered text is tokenized as Hugging Face's
  // apply_chat_template does: without adding BOS, which the template writes where it wants one.
  bool chat = false;
  std::string system_prompt;
  std::string chat_template_file;
  // Variables every chat render gets, as a JSON object's text (transformers' apply_chat_template
  // keyword arguments, e.g. {"enable_thinking": false}); in --serve, the defaults that a request's
  // chat_template_kwargs add to or replace per name. Empty: none.
  std::string chat_template_kwargs;
  // A conversation instead of requests (chat_session.hpp): world rank 0 reads the user's turns from
  // stdin and streams the answers; the KV cache holds `max_context` positions (0: the model's
  // max_position_embeddings, at most kDefaultMaxContext).
  bool interactive = false;
  int64_t max_context = 0;
  static constexpr int64_t kDefaultMaxContext = 8192;
  // --interactive: a JSON line per turn, {"messages": [...], "answer_tokens": [...]}, the
  // conversation so far with the answer as its last message (empty: none).
  std::string transcript;
  // An OpenAI-compatible HTTP server instead of requests (meshnn/server/serve.hpp): world rank 0
  // listens on host:port; the KV cache holds max_batch slots of `max_context` positions.
  bool serve = false;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string port_file;          // gets the bound port (for --port 0)
  std::string served_model_name;  // empty: the weights file's name
  std::string reasoning_parser;   // "qwen3" or "deepseek_r1": chat answers' reasoning apart; empty: none
  std::string tool_call_parser;   // "hermes", "llama3_json": tool calls in chat answers to requests with tools; empty: none
  bool prefix_reuse = true;       // serving::GenerationOptions::reuse_prefixes
  // The rope_scaling to run with instead of the weights file's (config.json's object as JSON text,
  // e.g. YaRN to stretch Qwen3's context); empty: the file's.
  std::string rope_scaling;
  std::string tokenizer;             // tokenizer file or directory; empty: the one in the weights file
  bool stream = true;                // print the first request's text as it is generated (world rank 0)
  int64_t batch = 1, prompt_len = 128;
  int64_t max_new_tokens = 32;       // per request, unless the tokens file gives max_new_tokens
  int64_t max_batch = 32;            // decode slots per replica
  int64_t prefill_chunk = 512;
  serving::SamplingParams sampling;
  serving::LogitPenalties penalties;  // presence, frequency and repetition penalties of every request
  // The weights file's generation_config.json (models/generation_config.hpp) sets the sampling
  // and repetition_penalty that `sampling_given` says the command line left alone.
  bool model_sampling_defaults = true;
  int64_t draft_tokens = 0;  // speculative decoding by prompt lookup (serving::GenerationOptions)
  bool jump_forward = true;  // structured output writes what its grammar forces at once (serving::GenerationOptions)
  SamplingGiven sampling_given;
  bool ignore_eos = false;           // benchmarks: always produce max_new_tokens
  bool warm_up = true;               // one untimed prefill pass and decode step first (serving::warm_up)
  std::string output, json;
  bool save_logits = false;
  uint64_t seed = 1234;              // generated model and prompts
  std::string calibration;           // cost model of model.planned_prefill (empty: the built-in one)
};

// Where a generated model of `preset` (and `layers`) is kept between runs: $MESHNN_CACHE_DIR, else
// $XDG_CACHE_HOME/meshnn, else ~/.cache/meshnn.
std::string generated_model_path(const std::string& preset, int64_t layers, uint64_t seed);

// Runs the job; returns the process exit status.
int run_llm_job(const LlmJobConfig& config);

}  // namespace meshnn::models::llama
