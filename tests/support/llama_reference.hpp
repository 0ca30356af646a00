// A float64 reference of Hugging Face LlamaForCausalLM for the tests: plain loops over the stored
// weights, sharing no code with meshnn's ops, kernels or Llama model (not even its config parser),
// so that agreeing with it means something.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meshnn::testing {

// Logits [tokens.size()][vocab] of one sequence at positions 0..n-1 of the Llama model in `file`,
// computed in float64 from the stored values (read as float32, so bfloat16 weights enter exactly as
// stored). Semantics are LlamaForCausalLM's (Qwen2ForCausalLM's, with q/k/v biases, for model_type
// "qwen2"; Qwen3ForCausalLM's, with an RMSNorm over each q and k head before RoPE, for "qwen3"):
// RMSNorm with weight, rotate-half RoPE (inv_freq_i =
// theta^(-2i/head_dim), then the attribute rope_scaling's linear, llama3, yarn or longrope scaling;
// longrope's long factors for a sequence longer than its original context), causal
// grouped-query attention scaled by 1/sqrt(head_dim) (keys within the last sliding_window positions
// when that attribute is there, as Mistral's), SwiGLU MLP, final norm, lm_head (the embedding when
// tie_word_embeddings). Configuration from the root attributes with Hugging Face's defaults
// (num_key_value_heads = heads, head_dim = hidden / heads, rms_norm_eps 1e-6, rope_theta 10000).
//
// Weights are loaded once per file name and cached; a file rewritten since (another inode, size or
// modification time) is loaded again. Thread-safe. Throws meshnn::Error for a missing or malformed dataset or
// attribute, an empty sequence or a token id outside [0, vocab).
std::vector<std::vector<double>> llama_reference_logits(const std::string& file, std::span<const int32_t> tokens);

}  // namespace meshnn::testing
