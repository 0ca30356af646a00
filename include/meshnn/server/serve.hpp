// An OpenAI-compatible HTTP server over a model on the mesh (meshnn-llm --serve): world rank 0
// answers /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics, and the mesh's
// replicas of the model run the requests with continuous batching, a request joining its
// replica's running batch at the next pass. Clients stream tokens as server-sent events as they are made; a client that goes
// away frees its slot at the next pass.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "meshnn/mesh/mesh_device.hpp"
#include "meshnn/server/reasoning.hpp"
#include "meshnn/server/tool_calls.hpp"
#include "meshnn/serving/generator.hpp"
#include "meshnn/text/chat_template.hpp"
#include "meshnn/text/tokenizer.hpp"

namespace meshnn::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (written to port_file and printed)
  std::string port_file;   // "" or a file that gets the bound port once the server listens
  std::string model_name;  // the model's name in /v1/models and in responses
  int64_t default_max_tokens = 16;  // a request's new tokens when it names none (OpenAI's default)
  int http_threads = 64;   // concurrent connections; each stream holds one for its duration
  // The defaults every request starts from (its own sampling parameters replace them), the stop
  // token ids and the prefill chunk.
  serving::GenerationOptions generation;
  // Chat answers' <think>...</think> reasoning, shown apart as reasoning_content (reasoning.hpp).
  ReasoningParser reasoning_parser = ReasoningParser::NONE;
  // Chat answers to requests with tools: <tool_call> blocks shown as tool_calls (tool_calls.hpp).
  ToolCallParser tool_call_parser = ToolCallParser::NONE;
};

// The text side, used by world rank 0 only.
struct ServeText {
  const text::Tokenizer* tokenizer = nullptr;  // nullptr: prompts only as token ids, answers as ids
  std::optional<int32_t> bos;                  // put before a completion prompt's text
  const text::ChatTemplate* chat_template = nullptr;  // nullptr: /v1/chat/completions is refused
  std::vector<std::pair<std::string, std::string>> special_tokens;  // the template's variables
  // More variables for every render (--chat-template-kwargs); a request's chat_template_kwargs
  // add to them or replace them by name.
  std::vector<std::pair<std::string, std::string>> chat_variables;
  std::time_t now = 0;  // strftime_now() in templates
};

// Serves until world rank 0 gets SIGINT or SIGTERM (Ctrl-C), then ends every request (finish
// reason "abort") and returns on every device. Collective over `world`, every rank of the job.
// `model` runs on this rank's replica, model.mesh(): `world` itself in tp and 2d, or one of
// `replicas` submeshes in dp and hybrid (`replica` is its index; world rank 0 must be device 0 of
// replica 0). World rank 0 sends each request to a replica with a free slot, preferring one that
// recently ran a request with the same start (its cache may hold it), and passes the replicas'
// tokens back to the clients. Throws meshnn::Error on every device alike when rank 0 cannot listen
// on host:port.
void serve(const serving::CausalLm& model, serving::KvCache& cache, const MeshDevice& world, int replica, int replicas,
           const ServeOptions& options, const ServeText& text);

}  // namespace meshnn::server
