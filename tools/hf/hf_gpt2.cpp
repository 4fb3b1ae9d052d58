#include "tools/hf/hf_gpt2.h"

#include <cmath>
#include <map>

#include "data/json_value.h"
#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "train/metrics/metrics.h"

namespace strata {
namespace {

constexpr const char* kPrefix = "transformer.";

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

// A block's 2-D weight: stored [out, in] here, [in, out] (Conv1D) there.
bool transposed(const TensorView& t) { return t.name.starts_with("h.") && t.shape.size() == 2; }

void transpose(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d)
    s.append(d ? ", " : "").append(std::to_string(shape[d]));
  return s + "]";
}

// The attention mask buffers older transformers saved with GPT-2 (not parameters).
bool is_mask_buffer(const std::string& name) {
  return name.starts_with("h.") &&
         (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"));
}

}  // namespace

std::vector<SafetensorsTensor> hf_gpt2_tensors(const GptShape& shape,
                                               const std::vector<float>& params) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  STRATA_CHECK(params.size() >= layout.total(), "parameters do not fill the layout");
  std::vector<SafetensorsTensor> tensors;
  for (const TensorView& t : layout.tensors()) {
    SafetensorsTensor out{kPrefix + hf_name(t.name), t.shape, {}, "F32"};
    const float* values = params.data() + t.offset;
    if (t.name == "wte") {  // the real vocabulary only
      out.shape[0] = shape.vocab_size;
      out.values.assign(values, values + std::size_t(shape.vocab_size) * shape.d_model);
    } else if (transposed(t)) {
      out.shape = {t.shape[1], t.shape[0]};
      out.values.resize(t.size);
      transpose(values, out.values.data(), t.shape[0], t.shape[1]);
    } else {
      out.values.assign(values, values + t.size);
    }
    tensors.push_back(std::move(out));
  }
  return tensors;
}

std::vector<float> strata_params_from_hf_gpt2(const GptShape& shape,
                                              const std::vector<SafetensorsTensor>& tensors,
                                              const std::string& origin) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  std::map<std::string, const TensorView*> wanted;  // GPT-2 name (no prefix) → Strata tensor
  for (const TensorView& t : layout.tensors()) wanted[hf_name(t.name)] = &t;
  std::map<std::string, const SafetensorsTensor*> found;
  const SafetensorsTensor* lm_head = nullptr;
  for (const SafetensorsTensor& t : tensors) {
    const std::string name =
        t.name.starts_with(kPrefix) ? t.name.substr(std::string(kPrefix).size()) : t.name;
    if (t.name == "lm_head.weight") {
      lm_head = &t;
    } else if (is_mask_buffer(name)) {
      continue;
    } else if (!wanted.count(name)) {
      fail(origin, ": unknown tensor '", t.name, "' (not part of a GPT-2 model with ",
           shape.n_layer, " layers)");
    } else if (!found.emplace(name, &t).second) {
      fail(origin, ": tensor '", name, "' appears twice (with and without the '", kPrefix,
           "' prefix)");
    }
  }
  std::vector<float> params(layout.total(), 0.0f);
  for (const TensorView& t : layout.tensors()) {
    const std::string name = hf_name(t.name);
    const auto it = found.find(name);
    if (it == found.end()) fail(origin, ": missing tensor '", kPrefix, name, "'");
    const SafetensorsTensor& in = *it->second;
    std::vector<std::int64_t> expected = t.shape;
    if (t.name == "wte") expected[0] = shape.vocab_size;
    if (transposed(t)) expected = {t.shape[1], t.shape[0]};
    if (in.shape != expected)
      fail(origin, ": tensor '", in.name, "' has shape ", shape_text(in.shape), ", expected ",
           shape_text(expected));
    float* out = params.data() + t.offset;
    if (transposed(t))
      transpose(in.values.data(), out, expected[0], expected[1]);
    else
      std::copy(in.values.begin(), in.values.end(), out);  // wte: rows past vocab_size stay 0
  }
  if (lm_head != nullptr) {
    const SafetensorsTensor& wte = *found.at("wte.weight");
    if (lm_head->shape != wte.shape || lm_head->values != wte.values)
      fail(origin,
           ": lm_head.weight differs from the token embedding (an untied LM head; "
           "Strata's head is tied to wte)");
  }
  return params;
}

std::string hf_gpt2_config_json(const GptShape& shape, int eos_id) {
  JsonLine config;
  config.add("model_type", "gpt2")
      .add("n_layer", shape.n_layer)
      .add("n_head", shape.n_head)
      .add("n_embd", shape.d_model)
      .add("n_positions", shape.seq_len)
      .add("n_ctx", shape.seq_len)
      .add("vocab_size", shape.vocab_size)
      .add("layer_norm_epsilon", 1e-5, "%g")
      .add("activation_function", "gelu_new")
      .add("resid_pdrop", 0.0)
      .add("embd_pdrop", 0.0)
      .add("attn_pdrop", 0.0)
      .add("tie_word_embeddings", true);
  if (eos_id >= 0) config.add("bos_token_id", eos_id).add("eos_token_id", eos_id);
  return config.str() + "\n";
}

GptShape parse_hf_gpt2_config(const std::string& json_text, const std::string& origin) {
  JsonValue root;
  try {
    root = parse_json(json_text);
  } catch (const Error& e) {
    fail(origin, ": not valid JSON: ", e.what());
  }
  if (!root.is(JsonValue::Kind::object)) fail(origin, ": not a JSON object");
  auto at = [&](const JsonValue& v) {
    return origin + ": " + json_location(json_text, v.position);
  };
  auto integer = [&](const char* key) {
    const JsonValue* v = root.find(key);
    if (v == nullptr) fail(origin, ": no \"", key, "\" (a GPT-2 config.json has it)");
    std::int64_t value = 0;
    if (!v->integer(value) || value < 1 || value > (1 << 30))
      fail(at(*v), ": \"", key, "\" must be a positive integer");
    return static_cast<int>(value);
  };
  auto unsupported = [&](const JsonValue& v, const char* key, const std::string& why) {
    fail(at(v), ": \"", key, "\" ", why);
  };
  GptShape shape{integer("n_layer"), integer("n_head"), integer("n_embd"), integer("n_positions"),
                 integer("vocab_size")};
  if (const JsonValue* v = root.find("model_type"))
    if (!v->is(JsonValue::Kind::string) || v->text != "gpt2")
      unsupported(*v, "model_type", "is not \"gpt2\"");
  if (const JsonValue* v = root.find("activation_function"))
    if (!v->is(JsonValue::Kind::string) ||
        (v->text != "gelu_new" && v->text != "gelu_pytorch_tanh"))
      unsupported(*v, "activation_function",
                  "must be the tanh GELU (\"gelu_new\" or \"gelu_pytorch_tanh\"), as Strata's");
  if (const JsonValue* v = root.find("layer_norm_epsilon"))
    if (!v->is(JsonValue::Kind::number) || std::abs(v->number - 1e-5) > 1e-12)
      unsupported(*v, "layer_norm_epsilon", "must be 1e-5 (Strata's LayerNorm eps)");
  if (const JsonValue* v = root.find("n_inner")) {
    std::int64_t inner = 0;
    if (!v->is(JsonValue::Kind::null) && !(v->integer(inner) && inner == 4LL * shape.d_model))
      unsupported(*v, "n_inner", "must be null or 4·n_embd (Strata's MLP width)");
  }
  auto must_be = [&](const char* key, bool expected) {
    const JsonValue* v = root.find(key);
    if (v != nullptr && !(v->is(JsonValue::Kind::boolean) && v->boolean == expected))
      unsupported(
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
