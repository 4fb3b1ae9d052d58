#include "model/fp8/fp8_state.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "model/core/error.h"

namespace strata {

namespace {
// The tensor names of FP8 GEMM `gemm` after "h.<i>.".
const char* weight_tensor(Fp8Layer gemm) {
  switch (gemm) {
    case Fp8Layer::qkv:
      return "attn.qkv.weight";
    case Fp8Layer::attn_proj:
      return "attn.proj.weight";
    case Fp8Layer::mlp_fc:
      return "mlp.fc.weight";
    case Fp8Layer::mlp_proj:
      return "mlp.proj.weight";
  }
  return "";
}
}  // namespace

Fp8State::Fp8State(const Fp8Settings& settings, int first_layer,
                   std::vector<std::array<bool, kFp8Layers>> runs)
    : settings_(settings), first_layer_(first_layer), runs_(std::move(runs)) {
  STRATA_CHECK(settings.history >= 1, "an FP8 amax history of ", settings.history, " steps");
  const std::size_t sites = runs_.size() * kFp8Layers * kFp8Operands;
  if (settings.scaling == Fp8Scaling::delayed) {
    history_.assign(sites * static_cast<std::size_t>(settings.history), 0.0f);
    step_.assign(sites, 0.0f);
  }
}

bool Fp8State::has_history(int layer, Fp8Layer gemm, Fp8Operand operand) const {
  return history_amax(layer, gemm, operand) > 0.0f;
}

float Fp8State::history_amax(int layer, Fp8Layer gemm, Fp8Operand operand) const {
  if (history_.empty()) return 0.0f;
  const auto h = static_cast<std::size_t>(settings_.history);
  const auto first = history_.begin() + static_cast<std::ptrdiff_t>(site(layer, gemm, operand) * h);
  return *std::max_element(first, first + static_cast<std::ptrdiff_t>(h));
}

void Fp8State::record(int layer, Fp8Layer gemm, Fp8Operand operand, float amax) {
  if (step_.empty()) return;
  float& kept = step_[site(layer, gemm, operand)];
  kept = std::isnan(amax) ? INFINITY : std::max(kept, amax);
}

void Fp8State::record_sites(std::span<const float> amaxes) {
  STRATA_CHECK(amaxes.size() == step_.size(), "FP8 step amaxes: ", amaxes.size(), " for ",
               step_.size(), " operands");
  for (std::size_t s = 0; s < step_.size(); ++s)
    step_[s] = std::isnan(amaxes[s]) ? INFINITY : std::max(step_[s], amaxes[s]);
}

void Fp8State::begin_step() { std::fill(step_.begin(), step_.end(), 0.0f); }

void Fp8State::end_step(std::span<Collectives* const> groups) {
  if (step_.empty()) return;
  for (Collectives* group : groups)
    if (group != nullptr && group->size() > 1) all_reduce_amax(*group, step_);
  const auto h = static_cast<std::ptrdiff_t>(settings_.history);
  for (std::size_t s = 0; s < step_.size(); ++s) {
    const auto first = history_.begin() + static_cast<std::ptrdiff_t>(s) * h;
    std::copy_backward(first, first + h - 1, first + h);  // the oldest falls out
    *first = std::isfinite(step_[s]) ? step_[s] : 0.0f;
  }
  begin_step();
}

std::vector<std::string> Fp8State::history_tensors(const ParameterLayout& layout) const {
  std::vector<std::string> names;
  if (history_.empty()) return names;
  for (std::size_t l = 0; l < runs_.size(); ++l) {
    const std::string block = "h." + std::to_string(first_layer_ + static_cast<int>(l)) + ".";
    for (int g = 0; g < kFp8Layers; ++g) {
      if (!runs_[l][static_cast<std::size_t>(g)]) continue;
      const auto gemm = static_cast<Fp8Layer>(g);
      if (gemm != Fp8Layer::qkv)
        names.push_back(block + weight_tensor(gemm));
      else if (layout.has(block + "attn.qkv.weight"))
        names.push_back(block + "attn.qkv.weight");
      else
        names.push_back(block + "attn.q.weight");
    }
  }
  return names;
}

std::vector<float> Fp8State::histories() const {
  std::vector<float> values;
  if (history_.empty()) return values;
  const auto per_operand = static_cast<std::size_t>(settings_.history);
  for (std::size_t l = 0; l < runs_.size(); ++l)
    for (int g = 0; g < kFp8Layers; ++g) {
      if (!runs_[l][static_cast<std::size_t>(g)]) continue;
      const std::size_t first =
          site(static_cast<int>(l), static_cast<Fp8Layer>(g), Fp8Operand::input) * per_operand;
      values.insert(
          values.end(), history_.begin() + static_cast<std::ptrdiff_t>(first),
          history_.begin() + static_cast<std::ptrdiff_t>(first + kFp8Operands * per_operand));
    }
  return values;
}

void Fp8State::set_histories(std::span<const float> values) {
  const auto per_gemm = static_cast<std::size_t>(settings_.history) * kFp8Operands;
  std::size_t at = 0;
  for (std::size_t l = 0; l < runs_.size(); ++l)
    for (int g = 0; g < kFp8Layers; ++g) {
      if (!runs_[l][static_cast<std::size_t>(g)]) continue;
      STRATA_CHECK(at + per_gemm <= values.size(), "FP8 amax histories: ", values.size(),
                   " values for more GEMMs");
      const std::size_t first =
          site(static_cast<int>(l), static_cast<Fp8Layer>(g), Fp8Operand::input) *
          static_cast<std::size_t>(settings_.history);
      std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(at), per_gemm,
                  history_.begin() + static_cast<std::ptrdiff_t>(first));
      at += per_gemm;
    }
  STRATA_CHECK(at == values.size(), "FP8 amax histories: ", values.size(), " values for ", at);
}

std::array<bool, kFp8Layers> fp8_gemms_of_block(const Fp8Settings& settings, const GptShape& shape,
                                                int layer) {
  const long C = shape.d_model;
  const bool dense = !shape.moe.is_moe_block(layer);
  return {settings.runs(Fp8Layer::qkv, C, shape.qkv_width()),
          settings.runs(Fp8Layer::attn_proj, C, C),
          dense && settings.runs(Fp8Layer::mlp_fc, C, shape.fc_width()),
          dense && settings.runs(Fp8Layer::mlp_proj, shape.ffn_width(), C)};
}

void all_reduce_amax(Collectives& group, std::span<float> amaxes) {
  // Non-negative floats (infinity included) order as their bits do.
  std::vector<std::int64_t> bits(amaxes.size());
  for (std::size_t i = 0; i < amaxes.size(); ++i) bits[i] = std::bit_cast<std::uint32_t>(amaxes[i]);
  group.all_reduce_max(bits.data(), bits.size());
  for (std::size_t i = 0; i < amaxes.size(); ++i)
    amaxes[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bits[i]));
}

}  // namespace strata
