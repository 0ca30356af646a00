// meshnn-llm --interactive: one conversation with the model. World rank 0 reads the user's turns
// from stdin (a line each) and hands each to every rank; every rank renders the whole conversation
// with the chat template and the model answers it as one request, streamed by rank 0; the answer
// becomes the conversation's next assistant message. The cache keeps the conversation between
// turns: a turn prefills only its tokens past those the cache holds. It answers as the whole
// conversation given as "messages" would, up to float rounding: the reused keys and values of the
// last answer were made by decode steps, which agree with a prefill's to rounding, as a request
// batched with others agrees with its solo run.
#pragma once

#include <ctime>

#include "meshnn/models/llama/llm_job.hpp"
#include "meshnn/models/llama/model.hpp"
#include "meshnn/serving/kv_cache.hpp"
#include "requests.hpp"

namespace meshnn::models::llama {

// Collective over `mesh`, the whole job, which the model spans (tp or 2d). Returns at the end of
// device 0's stdin, or when a turn would need more than `max_context` positions (said on stdout);
// a failure (a template that raises) is the same error on every rank.
void run_chat_session(const LlmJobConfig& c, const JobRequests& job, const LlamaModel& model,
                      serving::KvCache& cache, int64_t max_context, const MeshDevice& mesh, std::time_t now);

}  // namespace meshnn::models::llama
