#include "tools/hf/hf_gpt2.h"

#include <cmath>
#include <map>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "tools/hf/hf_config_json.h"
#include "tools/hf/hf_mapping.h"
#include "train/metrics/metrics.h"

namespace strata {
namespace {

const std::string kPrefix = "transformer.";

// GPT-2's name (without "transformer.") of Strata tensor `name`.
std::string hf_name(const std::string& name) {
  if (name == "wte" || name == "wpe") return name + ".weight";
  if (name.starts_with("lnf.")) return "ln_f." + name.substr(4);
  // h.{i}.<part>.<weight|bias>
  const std::size_t layer_end = name.find('.', 2);
  const std::string layer = name.substr(0, layer_end + 1), rest = name.substr(layer_end + 1);
  static const std::map<std::string, std::string> parts = {{"ln1.", "ln_1."},
                                                           {"ln2.", "ln_2."},
                                                           {"attn.qkv.", "attn.c_attn."},
                                                           {"attn.proj.", "attn.c_proj."},
                                                           {"mlp.fc.", "mlp.c_fc."},
                                                           {"mlp.proj.", "mlp.c_proj."}};
  for (const auto& [strata_part, hf_part] : parts)
    if (rest.starts_with(strata_part)) return layer + hf_part + rest.substr(strata_part.size());
  fail("internal: no GPT-2 name for tensor '", name, "'");
}

// One piece a tensor: a block's 2-D weight transposed ([out, in] here, Conv1D's [in, out]
// there), wte's real rows.
HfPieces gpt2_pieces(const GptShape& shape) {
  return [vocab = shape.vocab_size](const TensorView& t) {
    const bool block_weight = t.name.starts_with("h.") && t.shape.size() == 2;
    const std::int64_t rows = t.name == "wte" ? vocab : t.shape[0];
    return std::vector<HfPiece>{{kPrefix + hf_name(t.name), 0, rows, block_weight}};
  };
}

// The attention mask buffers older transformers saved with GPT-2 (not parameters).
bool is_mask_buffer(const std::string& name) {
  return name.starts_with("h.") &&
         (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
}

HfReading gpt2_reading(const GptShape& shape) {
  return {"GPT-2",
          shape.n_layer,
          kPrefix,
          is_mask_buffer,
          true,
          kPrefix + "wte.weight",
          "an untied LM head; Strata's GPT-2 head is tied to wte"};
}

}  // namespace

bool hf_gpt2_holds(const GptShape& shape) {
  const GptArchitecture& a = shape.arch;
  return a.norm == Norm::layernorm && a.mlp == MlpKind::gelu && a.position == Position::learned &&
         a.bias && a.tie_embeddings && !shape.grouped_query() && !shape.moe.enabled();
}

std::vector<SafetensorsTensor> hf_gpt2_tensors(const GptShape& shape,
                                               const std::vector<float>& params) {
  return hf_tensors_of(ParameterLayout::for_gpt(shape), params, gpt2_pieces(shape));
}

std::vector<float> strata_params_from_hf_gpt2(const GptShape& shape,
                                              const std::vector<SafetensorsTensor>& tensors,
                                              const std::string& origin) {
  return params_from_hf_tensors(ParameterLayout::for_gpt(shape), tensors, gpt2_pieces(shape),
                                gpt2_reading(shape), origin);
}

std::string hf_gpt2_config_json(const GptShape& shape, int eos_id) {
  JsonLine config;
  config.add("model_type", "gpt2")
      .add("architectures", std::vector<std::string>{"GPT2LMHeadModel"})
      .add("n_layer", shape.n_layer)
      .add("n_head", shape.n_head)
      .add("n_embd", shape.d_model)
      .add("n_positions", shape.seq_len)
      .add("n_ctx", shape.seq_len)
      .add("vocab_size", shape.vocab_size);
  if (shape.ffn_width() != 4 * shape.d_model) config.add("n_inner", shape.ffn_width());
  config
      .add("layer_norm_epsilon", shape.arch.norm_eps,
           shortest_number_format(shape.arch.norm_eps).c_str())
      .add("activation_function", "gelu_new")
      .add("resid_pdrop", 0.0)
      .add("embd_pdrop", 0.0)
      .add("attn_pdrop", 0.0)
      .add("tie_word_embeddings", true);
  if (eos_id >= 0) config.add("bos_token_id", eos_id).add("eos_token_id", eos_id);
  return config.str() + "\n";
}

GptShape parse_hf_gpt2_config(const std::string& json_text, const std::string& origin) {
  const HfConfigJson json(json_text, origin, "GPT-2");
  GptShape shape{json.positive("n_layer"), json.positive("n_head"), json.positive("n_embd"),
                 json.positive("n_positions"), json.positive("vocab_size")};
  if (const JsonValue* v = json.find("model_type"))
    if (!v->is(JsonValue::Kind::string) || v->text != "gpt2")
      json.unsupported(*v, "model_type", "is not \"gpt2\"");
  if (const JsonValue* v = json.find("activation_function"))
    if (!v->is(JsonValue::Kind::string) ||
        (v->text != "gelu_new" && v->text != "gelu_pytorch_tanh"))
      json.unsupported(
          *v, "activation_function",
          "must be the tanh GELU (\"gelu_new\" or \"gelu_pytorch_tanh\"), as Strata's");
  // GPT2Config's defaults: eps 1e-5, n_inner null (4·n_embd).
  shape.arch.norm_eps = json.number_or("layer_norm_epsilon", 1e-5);
  if (const JsonValue* v = json.find("layer_norm_epsilon"))
    if (!(shape.arch.norm_eps > 0 && shape.arch.norm_eps < 1))
      json.unsupported(*v, "layer_norm_epsilon", "must be in (0, 1) (Strata's model.norm_eps)");
  const int inner = json.positive_or("n_inner", 4 * shape.d_model);
  if (inner != 4 * shape.d_model) shape.arch.d_ff = inner;
  auto must_be = [&](const char* key, bool expected) {
    const JsonValue* v = json.find(key);
    if (v != nullptr && !(v->is(JsonValue::Kind::boolean) && v->boolean == expected))
      json.unsupported(
          *v, key,
          expected ? "must be true for Strata's GPT-2" : "must be false for Strata's GPT-2");
  };
  must_be("tie_word_embeddings", true);
  must_be("scale_attn_weights", true);
  must_be("scale_attn_by_inverse_layer_idx", false);
  must_be("add_cross_attention", false);
  if (shape.d_model % shape.n_head != 0)
    fail(origin, ": n_embd (", shape.d_model, ") is not a multiple of n_head (", shape.n_head, ")");
  return shape;
}

}  // namespace strata
