// Generation with continuous batching, for any CausalLm: requests wait in arrival order for one of
// the cache's slots. Every pass holds one decode row per active request, then as much of the
// admitted prompts as prefill_chunk tokens allow (a long prompt spans several passes); a request
// whose prompt completes samples its first token from the logits of its prompt's last token and
// decodes from the next pass on. Every pass reads all the weights once, so a prompt admitted while
// others decode rides along with their step instead of costing passes of its own. When a request
// ends (its eos token or its max_new_tokens) its slot goes to the next waiting request at once. A
// request's tokens depend on what else runs beside it only through rounding: each row of a pass is
// computed on its own and the draw is seeded by (seed, request id, step), but the matmul kernels
// chosen for a pass of few rows sum in another order than those for many (bfloat16 activations can
// carry that difference into a near-tied token).
//
// Collective over model.mesh(): every device of it calls with the same requests and options and
// makes the same decisions (the sampler's choice is identical everywhere).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "meshnn/serving/causal_lm.hpp"
#include "meshnn/serving/json_grammar.hpp"
#include "meshnn/serving/logit_penalties.hpp"
#include "meshnn/serving/token_mask.hpp"

namespace meshnn::serving {

struct GenerationRequest {
  uint64_t id = 0;              // seeds the request's draws; unique per request
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_new_tokens = 1;   // >= 1
  // A conversation's next turn: the first `cached_prefix` prompt tokens are already in slot
  // `cached_slot` of the cache, as an earlier request left them there, and are not prefilled again.
  // The request then takes that slot (waiting, in order, while it is busy). At most prompt size - 1:
  // the last prompt token's logits give the first new token. 0: any free slot, the whole prompt.
  int64_t cached_prefix = 0;
  int64_t cached_slot = 0;
  // This request's sampling, instead of the options' (a server's clients choose their own). Rows
  // of a pass are sampled in groups of equal parameters, one exchange per group.
  std::optional<SamplingParams> sampling;
  // This request's logit bias and penalties, instead of the options' (logit_penalties.hpp). A pass
  // holding a request with any copies its logits to adjust them, and so allocates.
  std::optional<LogitPenalties> penalties;
  // The tokens that end the request: the options' stop_token_ids (the model's eos ids) unless
  // ignore_eos, and stop_token_ids besides. Before min_new_tokens tokens none of them can be drawn
  // (their logits are -inf, as vLLM's min_tokens does; such passes allocate, as penalties do).
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  int64_t min_new_tokens = 0;
  // >= 0: each token's log-probability and this many of the most likely tokens at its position
  // (RequestOutput::logprobs). A pass holding such a request gathers its full logits, and so
  // allocates. At most the vocabulary size.
  int64_t logprobs = -1;
  // Also the log-probability of each prompt token after the first, from the logits of the position
  // before it, with max(logprobs, 0) alternatives (RequestOutput::prompt_logprobs): what scoring a
  // text needs (OpenAI's echo). The whole prompt is prefilled (no cached prefix), and each pass of
  // it gathers the logits of its rows.
  bool prompt_logprobs = false;
  // Structured output: the answer is JSON this grammar accepts (json_grammar.hpp). Before each draw
  // the tokens that would leave it get -inf logits on every device (token_mask.hpp), its stop
  // tokens among them, and the request ends with the token that closes the value
  // (RequestOutput::completed), or at max_new_tokens with the value still open (or where the mask
  // leaves no token, which a vocabulary with every byte never does). Needs the options'
  // token_bytes; such a request feeds no drafts, and each pass holding it allocates.
  std::shared_ptr<const JsonGrammar> grammar;
};

// A sampled token's log-probability under the model, and the most likely tokens at its position
// (most likely first; equal values by increasing id). Log-softmax of the raw logits, before
// temperature, top-k or top-p: what the model thinks, whatever was drawn.
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
// The log-softmax of `logits` (one position's, the whole vocabulary) at `token`, and its `top` most
// likely entries: computed in float64 and rounded to float.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int64_t top);

struct GenerationOptions {
  int64_t prefill_chunk = 512;  // prompt tokens per pass (besides the decode rows)
  SamplingParams sampling;
  LogitPenalties penalties;  // every request's, unless it brings its own
  std::vector<int32_t> stop_token_ids;  // a request ends when it produces one (the eos ids)
  bool keep_logits = false;             // gather the full logits of every sampled token (tests, --save-logits)
  // Automatic prefix reuse (a server's clients resend whole conversations): a request without a
  // cached_prefix of its own takes the free slot whose cache holds the longest start of its
  // prompt, as an earlier request left it there (its prompt and all its tokens but the last), and
  // prefills only the rest. With no such slot it takes the one idle longest. Where another slot,
  // busy or free, holds a longer start (many users behind one system prompt), those positions are
  // copied over from it before the next pass (KvCache::copy_positions); a request whose start an
  // earlier request in line is still prefilling waits for it rather than computing it twice. The
  // reused keys and values agree with a fresh prefill's to rounding: those of generated tokens
  // came from decode steps, and prefills in other chunks sum in other orders.
  bool reuse_prefixes = false;
  // Speculative decoding by prompt lookup (prompt_lookup.hpp), for greedy requests: a request
  // whose last tokens appeared before in its prompt or answer feeds the tokens that followed them
  // (up to draft_tokens, fewer while its drafts miss: DraftSchedule) beside its decode row, and
  // keeps each one the model's own choice agrees with. Its tokens are those it makes without (to
  // rounding: a pass of more rows may run other kernels); a pass may make several. Requests with penalties, log-probabilities, stop tokens
  // held back (min_new_tokens) or other sampling decode as usual, and so does every request with
  // keep_logits. 0: off. Passes with drafts allocate.
  int64_t draft_tokens = 0;
  // What each token writes (text::TokenTexts): requests with a grammar need it. The same on every
  // device.
  std::shared_ptr<const TokenBytes> token_bytes;
  // Jump-forward decoding (jump_forward.hpp) for requests with a grammar: after each token drawn,
  // the bytes the grammar then forces (written compactly) join the answer at once as tokens, and
  // the next pass feeds them beside the request's decode row, its next token drawn after the last
  // of them. The answer's text is one the grammar takes, but its tokens may be cut otherwise than
  // the model would cut them, and no pass is spent on a token the grammar dictates. Requests with
  // log-probabilities, and every request with keep_logits, draw every token. Off: each token drawn.
  bool jump_forward = false;
  // Called on every device as each token is sampled (index into `requests`, the token, whether it
  // ends the request, and its log-probabilities if the request asked for them, else nullptr), in
  // the order the tokens are made: for streaming text out.
  std::function<void(size_t request, int32_t token, bool last, const TokenLogprobs* logprobs)> on_token;
  // Called on every device when a request with prompt_logprobs has its prompt's (before on_token
  // gets its first token).
  std::function<void(size_t request, const std::vector<TokenLogprobs>& prompt_logprobs)> on_prompt_logprobs;
};

struct RequestOutput {
  std::vector<int32_t> tokens;     // generated ids, the eos token included when it ended the request
  // keep_logits: tokens.size() x vocab, row t the raw logits tokens[t] was drawn from (before penalties).
  std::vector<float> logits;
  std::vector<TokenLogprobs> logprobs;  // request.logprobs >= 0: one per token
  std::vector<TokenLogprobs> prompt_logprobs;  // request.prompt_logprobs: entry t for prompt token t + 1
  double time_to_first_token = 0;  // seconds from the request's admission to its first token
  bool cancelled = false;          // ended by Generator::cancel, not by a stop token or max_new_tokens
  bool completed = false;          // its grammar's value closed with its last token, which ended it
};

// A pass with decode rows counts as a decode step (its prompt rows, if any, as prefill tokens); a
// pass of prompt rows only as prefill.
// A pass holding prompt rows is a prefill pass, even when the decode rows of active requests ride
// along (their tokens are counted apart); a decode step holds decode rows only. So decode figures
// are those of decode steps alone, not diluted by prompts prefilled beside them.
struct GenerationStats {
  int64_t prefill_passes = 0, prefill_tokens = 0;  // passes holding prompt rows; prompt rows
  int64_t decode_steps = 0, decode_tokens = 0;     // decode-only passes; their rows summed
  int64_t decode_tokens_in_prefill = 0;            // decode rows that rode along in prefill passes
  int64_t reused_prompt_tokens = 0;                // prompt tokens found in the cache (reuse_prefixes)
  int64_t shared_prompt_tokens = 0;  // of those, copied from another slot's cache (reuse_prefixes)
  int64_t drafted_tokens = 0, accepted_draft_tokens = 0;  // draft_tokens: rows fed, and those kept
  int64_t forced_tokens = 0;  // jump_forward: tokens the grammars wrote without a draw
  double prefill_seconds = 0, decode_seconds = 0, sampling_seconds = 0;
  PhaseTimes prefill_times, decode_times;  // forward passes only (compute / communication)
};

struct GenerationResult {
  std::vector<RequestOutput> outputs;  // in the order of the requests
  GenerationStats stats;
};

// Continuous batching one pass at a time, for requests that arrive while others run (a server):
// submit() queues a request, step() runs one pass, cancel() ends a request early. generate() is
// this loop run until it is idle. Collective over model.mesh() like generate(): every device
// submits, cancels and steps alike, in the same order.
class Generator {
 public:
  // Called on every device when a request ends (its stop token, its max_new_tokens, or cancel()):
  // its handle and its output, whose tokens the generator no longer keeps.
  using FinishCallback = std::function<void(size_t handle, RequestOutput&& output)>;

  // Throws meshnn::Error for invalid options (sampling, prefill_chunk). The model and the cache
  // must outlive the generator.
  Generator(const CausalLm& model, KvCache& cache, GenerationOptions options, FinishCallback on_finish = {});
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Throws meshnn::Error naming `what` (e.g. "request 3") for a request generate() would refuse.
  // Pure: a caller may check a request before it is sent to the other devices.
  void check(const GenerationRequest& request, const std::string& what) const;
  // Queues a checked request behind the waiting ones. Returns its handle (0, 1, 2, ... in
  // submission order, so the same on every device); on_token's first argument is that handle.
  size_t submit(GenerationRequest request);
  // Ends a request before the next pass: a waiting one leaves the queue, a running one frees its
  // slot. on_finish gets what it made so far; an unknown or finished handle is ignored.
  void cancel(size_t handle);
  // Nothing is waiting or running: step() would do nothing.
  bool idle() const;
  // Admits waiting requests to free slots and runs one pass. A decode step allocates nothing once
  // steps of its shape have run (see generate()), unless its rows' sampling parameters differ.
  void step();
  const GenerationStats& stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Runs every request to its end using cache.slots() slots. Throws meshnn::Error (the same on
// every device, before any pass) for an empty prompt, max_new_tokens < 1, a prompt plus its new
// tokens longer than the cache or the model's positions, token ids outside the vocabulary, or
// invalid sampling parameters. A decode step after the first allocates nothing (forward pass,
// sampling and the loop's own bookkeeping reuse what the first steps made), unless keep_logits
// gathers the full logits or on_token allocates.
GenerationResult generate(const CausalLm& model, KvCache& cache, std::span<const GenerationRequest> requests,
                          const GenerationOptions& options);

// One pass of `prompt_rows` prompt rows (dummy tokens spread over the cache's slots from position
// 0) and one decode step of `decode_rows` rows (slots 0.., position 0), logits computed and
// dropped: the buffers of the job's largest passes (the model's, the matmuls' scratch) are made and
// their pages touched before the first request is timed, as TT-NN runs a model once (its compile
// run) before the runs it measures. Without it the first request's time to first token pays for
// them (docs/performance.md has what that costs). The cache rows written are as a finished request
// leaves them: a request writes its positions before any pass reads them. Returns the seconds
// taken. Collective over model.mesh(), like generate; rows are capped at what the cache holds.
double warm_up(const CausalLm& model, KvCache& cache, int64_t prompt_rows, int64_t decode_rows);

}  // namespace meshnn::serving
