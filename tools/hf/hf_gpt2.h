// Hugging Face's GPT-2 (transformers' GPT2LMHeadModel) as Strata's tensors (docs/ARCHITECTURE.md
// §5): names, orientation, vocabulary padding and config.json. A pure mapping: files are read and
// written by tools/hf/hf_convert.h, the shared machinery is tools/hf/hf_mapping.h.
//
//   Strata (weights [out, in])               Hugging Face (Conv1D weights [in, out])
//   wte [Vp, C]                              transformer.wte.weight [V, C]   (first V rows)
//   wpe [T, C]                               transformer.wpe.weight [n_positions, C]
//   h.{i}.ln1.{weight,bias} [C]              transformer.h.{i}.ln_1.{weight,bias}
//   h.{i}.attn.qkv.weight [3C, C]            transformer.h.{i}.attn.c_attn.weight [C, 3C]
//   h.{i}.attn.qkv.bias [3C]                 transformer.h.{i}.attn.c_attn.bias
//   h.{i}.attn.proj.weight [C, C]            transformer.h.{i}.attn.c_proj.weight [C, C] (ᵀ)
//   h.{i}.ln2.{weight,bias}                  transformer.h.{i}.ln_2.{weight,bias}
//   h.{i}.mlp.fc.weight [F, C]               transformer.h.{i}.mlp.c_fc.weight [C, F]
//   h.{i}.mlp.proj.weight [C, F]             transformer.h.{i}.mlp.c_proj.weight [F, C]
//   lnf.{weight,bias}                        transformer.ln_f.{weight,bias}
// Both split c_attn's 3C outputs the same way (all q, then all k, then all v; heads contiguous),
// so the fused weight only transposes. The LM head is tied to wte in both. Strata's padded
// vocabulary rows V … Vp−1 are dropped on export and zero on import. F is 4C unless model.d_ff
// (n_inner) says otherwise; LayerNorm's eps is model.norm_eps (layer_norm_epsilon).
//
// Import accepts GPT2LMHeadModel.save_pretrained's names (transformer.…) and GPT2Model's / the
// hub's (no prefix); it ignores the attention mask buffers (attn.bias, attn.masked_bias) and a
// stored lm_head.weight equal to wte (an untied head is an error: Strata cannot hold one).
#pragma once

#include <string>
#include <vector>

#include "model/gpt_shape.h"
#include "tools/hf/safetensors.h"

namespace strata {

// Whether transformers' GPT2LMHeadModel computes `shape`: GPT-2's block (the model keys'
// defaults: LayerNorm with biases, a GELU MLP of any width, learned positions, multi-head
// attention, a tied head), without experts.
bool hf_gpt2_holds(const GptShape& shape);

// GPT-2's tensors (GPT2LMHeadModel names, Conv1D orientation, wte unpadded) of the parameters
// `params`, laid out by ParameterLayout::for_gpt(shape).
std::vector<SafetensorsTensor> hf_gpt2_tensors(const GptShape& shape,
                                               const std::vector<float>& params);

// The inverse: Strata's parameters (ParameterLayout::for_gpt(shape) order, padding rows zero)
// from a GPT-2 checkpoint's tensors. Error (naming `origin` and the tensor) on a missing,
// unknown, duplicated or misshapen tensor, or an untied lm_head.
std::vector<float> strata_params_from_hf_gpt2(const GptShape& shape,
                                              const std::vector<SafetensorsTensor>& tensors,
                                              const std::string& origin);

// config.json for GPT2LMHeadModel.from_pretrained: n_layer, n_head, n_embd, n_positions (the
// context, seq_len), vocab_size (unpadded), n_inner (F, when not 4C), layer_norm_epsilon
// (model.norm_eps), activation_function "gelu_new" (the tanh GELU), no dropout; bos/eos ids when
// eos_id >= 0.
std::string hf_gpt2_config_json(const GptShape& shape, int eos_id);

// The model shape a GPT-2 config.json describes. Error (naming `origin` and the field) when a
// field is missing or of the wrong type, or when the model is one Strata does not compute: another
// model_type, an activation other than the tanh GELU, untied embeddings, attention scaled by layer
// or cross-attention.
GptShape parse_hf_gpt2_config(const std::string& json_text, const std::string& origin);

}  // namespace strata
