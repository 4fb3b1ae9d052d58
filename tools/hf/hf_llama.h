// Hugging Face's Llama (transformers' LlamaForCausalLM) as Strata's tensors (docs/ARCHITECTURE.md
// §5): names, the split of Strata's fused tensors, vocabulary padding and config.json. A pure
// mapping: files are read and written by tools/hf/hf_convert.h, the shared machinery is
// tools/hf/hf_mapping.h.
//
//   Strata (weights [out, in] in both)       Hugging Face (prefix "model." except lm_head)
//   wte [Vp, C]                              embed_tokens.weight [V, C]   (first V rows)
//   h.{i}.ln1.weight [C]                     layers.{i}.input_layernorm.weight
//   h.{i}.attn.qkv.weight [3C, C]            layers.{i}.self_attn.q_proj.weight  rows 0 … C−1
//     (multi-head: kv_heads = n_head)          … k_proj.weight rows C … 2C−1, v_proj 2C … 3C−1
//   h.{i}.attn.{q,k,v}.weight                layers.{i}.self_attn.{q,k,v}_proj.weight
//     (grouped-query) [C, C], [KV·hs, C] ×2    [C, C], [KV·hs, C], [KV·hs, C]
//   h.{i}.attn.proj.weight [C, C]            layers.{i}.self_attn.o_proj.weight
//   h.{i}.ln2.weight [C]                     layers.{i}.post_attention_layernorm.weight
//   h.{i}.mlp.fc.weight [2F, C]              layers.{i}.mlp.gate_proj.weight rows 0 … F−1,
//                                              layers.{i}.mlp.up_proj.weight rows F … 2F−1
//   h.{i}.mlp.proj.weight [C, F]             layers.{i}.mlp.down_proj.weight
//   lnf.weight [C]                           norm.weight
//   lm_head.weight [Vp, C] (untied)          lm_head.weight [V, C]        (first V rows)
// With model.bias the biases split alike (attention_bias and mlp_bias both true). Both number a
// head's channels the same way and turn pairs (j, j + hs/2) with RoPE (rotate-half), so q and k
// need no permutation; query head h reads key/value head h / (n_head / kv_heads) in both.
//
// Import also takes LlamaModel's names (no "model." prefix), ignores the rotary inv_freq buffers
// older transformers saved, and a stored lm_head.weight equal to the embedding when
// tie_word_embeddings is true.
#pragma once

#include <string>
#include <vector>

#include "model/gpt_shape.h"
#include "tools/hf/safetensors.h"

namespace strata {

// Llama's tensors (LlamaForCausalLM names, embeddings unpadded) of the parameters `params`, laid
// out by ParameterLayout::for_gpt(shape). `shape` is a Llama-style model (hf_llama_holds).
std::vector<SafetensorsTensor> hf_llama_tensors(const GptShape& shape,
                                                const std::vector<float>& params);

// The inverse: Strata's parameters (ParameterLayout::for_gpt(shape) order, padding rows zero)
// from a Llama checkpoint's tensors. Error (naming `origin` and the tensor) on a missing,
// unknown, duplicated or misshapen tensor, or a stored lm_head that differs from the embedding of
// a tied model.
std::vector<float> strata_params_from_hf_llama(const GptShape& shape,
                                               const std::vector<SafetensorsTensor>& tensors,
                                               const std::string& origin);

// Whether transformers' LlamaForCausalLM computes `shape`: RMSNorm, SwiGLU and RoPE (any
// kv_heads, with or without biases, tied or not), without experts.
bool hf_llama_holds(const GptShape& shape);

// config.json for LlamaForCausalLM.from_pretrained: hidden_size, intermediate_size (F),
// num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings
// (the context, seq_len), vocab_size (unpadded), rms_norm_eps, rope_theta, hidden_act "silu",
// tie_word_embeddings, attention_bias and mlp_bias (model.bias); bos/eos ids when eos_id >= 0.
std::string hf_llama_config_json(const GptShape& shape, int eos_id);

// The model shape a Llama config.json describes (norm rmsnorm, mlp swiglu, position rope,
// d_ff = intermediate_size). Error (naming `origin` and the field) when a field is missing or of
// the wrong type, or when the model is one Strata does not compute: another model_type or
// hidden_act, a head_dim other than hidden_size / num_attention_heads, rope scaling (rope_scaling
// or a rope_parameters rope_type other than "default"), partial rotary embeddings,
// attention_bias unlike mlp_bias, num_key_value_heads not dividing num_attention_heads.
GptShape parse_hf_llama_config(const std::string& json_text, const std::string& origin);

}  // namespace strata
