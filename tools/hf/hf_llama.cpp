#include "tools/hf/hf_llama.h"

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "tools/hf/hf_config_json.h"
#include "tools/hf/hf_mapping.h"
#include "train/metrics/metrics.h"

namespace strata {
namespace {

const std::string kPrefix = "model.";

// The Llama tensors of Strata tensor `t` (hf_llama.h's table).
std::vector<HfPiece> llama_pieces_of(const TensorView& t, int vocab) {
  const std::string& name = t.name;
  const std::int64_t rows = t.shape[0];
  if (name == "wte") return {{kPrefix + "embed_tokens.weight", 0, vocab}};
  if (name == "lm_head.weight") return {{"lm_head.weight", 0, vocab}};
  if (name == "lnf.weight") return {{kPrefix + "norm.weight", 0, rows}};
  // h.{i}.<part>.<weight|bias>
  const std::size_t layer_end = name.find('.', 2), kind = name.rfind('.');
  if (name.starts_with("h.") && layer_end != std::string::npos && kind > layer_end) {
    const std::string layer = kPrefix + "layers." + name.substr(2, layer_end - 2) + ".";
    const std::string part = name.substr(layer_end + 1, kind - layer_end - 1);
    const std::string suffix = name.substr(kind);  // ".weight" or ".bias"
    auto whole = [&](const std::string& hf_part) {
      return std::vector<HfPiece>{{layer + hf_part + suffix, 0, rows}};
    };
    // Equal blocks of rows, in order.
    auto split = [&](std::initializer_list<const char*> hf_parts) {
      std::vector<HfPiece> pieces;
      const std::int64_t each = rows / static_cast<std::int64_t>(hf_parts.size());
      for (const char* hf_part : hf_parts)
        pieces.push_back({layer + hf_part + suffix, each * std::int64_t(pieces.size()), each});
      return pieces;
    };
    if (suffix == ".weight" && part == "ln1") return whole("input_layernorm");
    if (suffix == ".weight" && part == "ln2") return whole("post_attention_layernorm");
    if (part == "attn.qkv")
      return split({"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"});
    if (part == "attn.q" || part == "attn.k" || part == "attn.v")
      return whole("self_attn." + part.substr(5) + "_proj");
    if (part == "attn.proj") return whole("self_attn.o_proj");
    if (part == "mlp.fc") return split({"mlp.gate_proj", "mlp.up_proj"});
    if (part == "mlp.proj") return whole("mlp.down_proj");
  }
  fail("internal: no Llama name for tensor '", name, "'");
}

// Older transformers saved each layer's rotary frequencies (a buffer, not a parameter).
bool is_rotary_buffer(const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); }

HfReading llama_reading(const GptShape& shape) {
  return {"Llama",
          shape.n_layer,
          kPrefix,
          is_rotary_buffer,
          shape.arch.tie_embeddings,
          kPrefix + "embed_tokens.weight",
          "but config.json's tie_word_embeddings is true"};
}

}  // namespace

bool hf_llama_holds(const GptShape& shape) {
  const GptArchitecture& a = shape.arch;
  return a.norm == Norm::rmsnorm && a.mlp == MlpKind::swiglu && a.position == Position::rope &&
         !shape.moe.enabled();
}

std::vector<SafetensorsTensor> hf_llama_tensors(const GptShape& shape,
                                                const std::vector<float>& params) {
  STRATA_CHECK(hf_llama_holds(shape), "not a Llama-style model");
  return hf_tensors_of(ParameterLayout::for_gpt(shape), params,
                       [&](const TensorView& t) { return llama_pieces_of(t, shape.vocab_size); });
}

std::vector<float> strata_params_from_hf_llama(const GptShape& shape,
                                               const std::vector<SafetensorsTensor>& tensors,
                                               const std::string& origin) {
  return params_from_hf_tensors(
      ParameterLayout::for_gpt(shape), tensors,
      [&](const TensorView& t) { return llama_pieces_of(t, shape.vocab_size); },
      llama_reading(shape), origin);
}

std::string hf_llama_config_json(const GptShape& shape, int eos_id) {
  const GptArchitecture& a = shape.arch;
  JsonLine config;
  config.add("model_type", "llama")
      .add("architectures", std::vector<std::string>{"LlamaForCausalLM"})
      .add("vocab_size", shape.vocab_size)
      .add("hidden_size", shape.d_model)
      .add("intermediate_size", shape.ffn_width())
      .add("num_hidden_layers", shape.n_layer)
      .add("num_attention_heads", shape.n_head)
      .add("num_key_value_heads", shape.kv_head_count())
      .add("head_dim", shape.head_size())
      .add("max_position_embeddings", shape.seq_len)
      .add("rms_norm_eps", a.norm_eps, shortest_number_format(a.norm_eps).c_str())
      .add("rope_theta", a.rope_theta, shortest_number_format(a.rope_theta).c_str())
      .add("hidden_act", "silu")
      .add("tie_word_embeddings", a.tie_embeddings)
      .add("attention_bias", a.bias)
      .add("mlp_bias", a.bias)
      .add("attention_dropout", 0.0);
  if (eos_id >= 0) config.add("bos_token_id", eos_id).add("eos_token_id", eos_id);
  return config.str() + "\n";
}

GptShape parse_hf_llama_config(const std::string& json_text, const std::string& origin) {
  const HfConfigJson json(json_text, origin, "Llama");
  GptShape shape{json.positive("num_hidden_layers"), json.positive("num_attention_heads"),
                 json.positive("hidden_size"), json.positive("max_position_embeddings"),
                 json.positive("vocab_size")};
  GptArchitecture& a = shape.arch;
  a.norm = Norm::rmsnorm;
  a.mlp = MlpKind::swiglu;
  a.position = Position::rope;
  if (const JsonValue* v = json.find("model_type"))
    if (!v->is(JsonValue::Kind::string) || v->text != "llama")
      json.unsupported(*v, "model_type", "is not \"llama\"");
  if (shape.d_model % shape.n_head != 0)
    fail(origin, ": hidden_size (", shape.d_model, ") is not a multiple of num_attention_heads (",
         shape.n_head, ")");
  if (const int head_dim = json.positive_or("head_dim", shape.head_size());
      head_dim != shape.head_size())
    json.unsupported(
        *json.find("head_dim"), "head_dim",
        "is " + std::to_string(head_dim) + ", not hidden_size / num_attention_heads = " +
            std::to_string(shape.head_size()) + " (Strata's heads are d_model / n_head wide)");
  const int kv_heads = json.positive_or("num_key_value_heads", shape.n_head);
  if (kv_heads > shape.n_head || shape.n_head % kv_heads != 0)
    json.unsupported(*json.find("num_key_value_heads"), "num_key_value_heads",
                     "(" + std::to_string(kv_heads) + ") must divide num_attention_heads (" +
                         std::to_string(shape.n_head) + ")");
  a.kv_heads = kv_heads == shape.n_head ? 0 : kv_heads;  // model.kv_heads 0: multi-head
  // intermediate_size as model.d_ff, 0 when it is the default width SwiGLU's rule gives.
  const int inner = json.positive("intermediate_size");
  a.d_ff = shape.ffn_width() == inner ? 0 : inner;
  if (const std::string act = json.text_or_empty("hidden_act"); !act.empty() && act != "silu")
    json.unsupported(*json.find("hidden_act"), "hidden_act",
                     "is \"" + act + "\": Strata's SwiGLU gates with \"silu\"");
  a.norm_eps = json.number_or("rms_norm_eps", 1e-6);  // LlamaConfig's default
  if (!(a.norm_eps > 0 && a.norm_eps < 1))
    json.unsupported(*json.find("rms_norm_eps"), "rms_norm_eps",
                     "must be in (0, 1) (Strata's model.norm_eps)");
  // RoPE: transformers 4 writes rope_theta and rope_scaling, 5 rope_parameters.
  a.rope_theta = json.number_or("rope_theta", 10000.0);
  if (const JsonValue* v = json.find("rope_scaling"); v != nullptr && !v->is(JsonValue::Kind::null))
    json.unsupported(*v, "rope_scaling", "must be null: Strata's RoPE has no scaling");
  if (const JsonValue* v = json.find("rope_parameters");
      v != nullptr && !v->is(JsonValue::Kind::null)) {
    if (!v->is(JsonValue::Kind::object))
      json.unsupported(*v, "rope_parameters", "must be an object");
    for (const JsonMember& m : v->members) {
      const std::string key = "rope_parameters." + m.name;
      if (m.name == "rope_theta" && m.value.is(JsonValue::Kind::number))
        a.rope_theta = m.value.number;
      else if ((m.name == "rope_type" || m.name == "type") && m.value.is(JsonValue::Kind::string) &&
               m.value.text == "default")
        continue;
      else
        json.unsupported(m.value, key.c_str(),
                         "is not Strata's RoPE (rope_type \"default\" and rope_theta only)");
    }
  }
  if (!(a.rope_theta > 1))
    fail(origin, ": rope_theta (", a.rope_theta, ") must be > 1 (Strata's model.rope_theta)");
  if (const JsonValue* v = json.find("partial_rotary_factor");
      v != nullptr && !(v->is(JsonValue::Kind::number) && v->number == 1.0))
    json.unsupported(*v, "partial_rotary_factor", "must be 1: Strata turns every channel");
  a.bias = json.boolean_or("attention_bias", false);
  if (json.boolean_or("mlp_bias", false) != a.bias) {
    const bool stated = json.find("mlp_bias") != nullptr;  // else attention_bias is true
    json.unsupported(*json.find(stated ? "mlp_bias" : "attention_bias"),
                     stated ? "mlp_bias" : "attention_bias",
                     "differs from the other of attention_bias and mlp_bias: Strata's model.bias "
                     "is one switch for every linear layer");
  }
  a.tie_embeddings = json.boolean_or("tie_word_embeddings", false);  // LlamaConfig's default
  return shape;
}

}  // namespace strata
