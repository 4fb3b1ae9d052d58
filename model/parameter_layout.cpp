#include "model/parameter_layout.h"

#include <cmath>
#include <string_view>

#include "model/core/counter_rng.h"
#include "model/core/error.h"

namespace strata {

std::int64_t GptShape::params_excluding_positions() const {
  const std::int64_t C = d_model;
  const std::int64_t per_layer =
      12 * C * C + 13 * C;  // qkv 3C², proj C², fc 4C², proj 4C², biases, 2 LN
  return static_cast<std::int64_t>(padded_vocab()) * C + n_layer * per_layer + 2 * C;
}

double GptShape::flops_per_token() const {
  return 6.0 * static_cast<double>(params_excluding_positions()) +
         12.0 * n_layer * d_model * static_cast<double>(seq_len);
}

void ParameterLayout::add(std::string name, std::vector<std::int64_t> shape, bool decay) {
  std::size_t size = 1;
  for (std::int64_t d : shape) size *= static_cast<std::size_t>(d);
  tensors_.push_back(TensorView{std::move(name), std::move(shape), total_, size, decay});
  total_ += size;
}

ParameterLayout ParameterLayout::for_gpt(const GptShape& s) {
  const std::int64_t C = s.d_model;
  ParameterLayout layout;
  layout.add("wte", {s.padded_vocab(), C}, true);
  layout.add("wpe", {s.seq_len, C}, true);
  for (int i = 0; i < s.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    layout.add(h + "ln1.weight", {C}, false);
    layout.add(h + "ln1.bias", {C}, false);
    layout.add(h + "attn.qkv.weight", {3 * C, C}, true);
    layout.add(h + "attn.qkv.bias", {3 * C}, false);
    layout.add(h + "attn.proj.weight", {C, C}, true);
    layout.add(h + "attn.proj.bias", {C}, false);
    layout.add(h + "ln2.weight", {C}, false);
    layout.add(h + "ln2.bias", {C}, false);
    layout.add(h + "mlp.fc.weight", {4 * C, C}, true);
    layout.add(h + "mlp.fc.bias", {4 * C}, false);
    layout.add(h + "mlp.proj.weight", {C, 4 * C}, true);
    layout.add(h + "mlp.proj.bias", {C}, false);
  }
  layout.add("lnf.weight", {C}, false);
  layout.add("lnf.bias", {C}, false);
  return layout;
}

const TensorView& ParameterLayout::at(const std::string& name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return t;
  fail("no parameter named '", name, "'");
}

namespace {
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

void initialize_gpt_parameters(const ParameterLayout& layout, const GptShape& shape,
                               std::uint64_t seed, float* params) {
  const double residual_std = 0.02 / std::sqrt(2.0 * shape.n_layer);
  for (const TensorView& t : layout.tensors()) {
    float* p = params + t.offset;
    const bool is_weight_matrix = t.shape.size() == 2;
    if (!is_weight_matrix) {
      const float value = ends_with(t.name, ".weight") ? 1.0f : 0.0f;  // LN gain 1, biases 0
      for (std::size_t i = 0; i < t.size; ++i) p[i] = value;
      continue;
    }
    const bool residual =
        ends_with(t.name, "attn.proj.weight") || ends_with(t.name, "mlp.proj.weight");
    const double stddev = residual ? residual_std : 0.02;
    const std::uint64_t key = hash_combine(seed, hash_name(t.name));
    // Only real vocabulary rows of wte are drawn; padded rows stay 0 (they are never targets).
    const std::size_t live =
        t.name == "wte" ? static_cast<std::size_t>(shape.vocab_size) * t.shape[1] : t.size;
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < t.size; ++i)
      p[i] = i < live ? static_cast<float>(stddev * counter_normal(key, i)) : 0.0f;
  }
}

}  // namespace strata
