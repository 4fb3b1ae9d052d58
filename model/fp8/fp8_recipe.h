// FP8 training's recipe (docs/ARCHITECTURE.md §6, "FP8"): which of a block's GEMMs multiply in FP8
// (precision.fp8_layers, and precision.fp8_min_size for the small ones), how their operands are
// scaled (precision.fp8: per tensor from its own amax, per row, or per tensor from an amax history
// of precision.fp8_history steps) and in which format (precision.fp8_format: e4m3 for every
// operand, or hybrid: e4m3 forward, e5m2 for the gradients, whose range matters more than their
// precision). The head and attention itself stay in the compute dtype.
//
// Each GEMM has three operands, each cast once per use: in the forward out = input · weightᵀ, in
// the backward d input = grad_output · weight and d weight = grad_outputᵀ · input.
#pragma once

#include <vector>

#include "model/core/choice.h"
#include "model/kernels/fp8.h"

namespace strata {

// precision.fp8.
enum class Fp8Scaling {
  none,        // every GEMM in the compute dtype
  tensorwise,  // one scale per operand, from that operand's own amax (current scaling)
  rowwise,     // one scale per row of the operand along the GEMM's reduction dimension
  delayed,     // one scale per operand, from the largest amax of the last fp8_history steps
};
inline constexpr Choices kFp8ScalingChoices{std::array{
    ChoiceWord{Fp8Scaling::none, "none"}, ChoiceWord{Fp8Scaling::tensorwise, "tensorwise"},
    ChoiceWord{Fp8Scaling::rowwise, "rowwise"}, ChoiceWord{Fp8Scaling::delayed, "delayed"}}};

// precision.fp8_format.
enum class Fp8Formats { e4m3, hybrid };
inline constexpr Choices kFp8FormatsChoices{
    std::array{ChoiceWord{Fp8Formats::e4m3, "e4m3"}, ChoiceWord{Fp8Formats::hybrid, "hybrid"}}};

// The GEMMs of a block that may run in FP8 (precision.fp8_layers), in the order of their state.
enum class Fp8Layer { qkv, attn_proj, mlp_fc, mlp_proj };
inline constexpr int kFp8Layers = 4;
inline constexpr Choices kFp8LayerChoices{
    std::array{ChoiceWord{Fp8Layer::qkv, "qkv"}, ChoiceWord{Fp8Layer::attn_proj, "attn_proj"},
               ChoiceWord{Fp8Layer::mlp_fc, "mlp_fc"}, ChoiceWord{Fp8Layer::mlp_proj, "mlp_proj"}}};

// A GEMM's operands, in the order of their state.
enum class Fp8Operand { input, weight, grad_output };
inline constexpr int kFp8Operands = 3;

// The groups whose ranks hold other parts of what one scale of `operand` covers (`axis` of the
// operand as a linear layer holds it: input (N, IC), weight (OC, IC), grad_output (N, OC)), so
// its amax is the largest over them: tensor parallelism where the layer splits that dimension (a
// row-parallel layer its input channels, a column-parallel one its output channels), context
// parallelism for a micro-batch's rows. The one rule of both backends' casts.
struct Fp8AmaxGroups {
  bool tp = false, cp = false;
};
constexpr Fp8AmaxGroups fp8_amax_groups(Fp8Operand operand, bool row_parallel, Fp8Axis axis) {
  // Whether the operand's columns, or its rows, are split over tp; its rows over cp.
  const bool columns_tp = operand == Fp8Operand::grad_output ? !row_parallel : row_parallel;
  const bool rows_tp = operand == Fp8Operand::weight && !row_parallel;
  const bool rows_cp = operand != Fp8Operand::weight;
  switch (axis) {
    case Fp8Axis::tensor:
      return {columns_tp || rows_tp, rows_cp};
    case Fp8Axis::rows:
      return {columns_tp, false};
    case Fp8Axis::columns:
      return {rows_tp, rows_cp};
  }
  return {};
}

struct Fp8Settings {
  Fp8Scaling scaling = Fp8Scaling::none;
  Fp8Formats formats = Fp8Formats::hybrid;
  int history = 16;  // delayed: steps of amax kept per operand
  std::vector<Fp8Layer> layers{Fp8Layer::qkv, Fp8Layer::attn_proj, Fp8Layer::mlp_fc,
                               Fp8Layer::mlp_proj};
  // A GEMM whose weight has a logical dimension (in or out, whatever the layout) below this stays
  // in the compute dtype: small GEMMs lose more to the casts than FP8's rate gains (torchtitan
  // measured 0.80x at 1024·2048·1024 on an H100).
  int min_size = 1024;

  bool enabled() const { return scaling != Fp8Scaling::none; }
  // Whether GEMM `layer` with a weight of logical shape [out, in] multiplies in FP8.
  bool runs(Fp8Layer layer, long in, long out) const {
    if (!enabled() || in < min_size || out < min_size) return false;
    for (const Fp8Layer l : layers)
      if (l == layer) return true;
    return false;
  }
  Fp8Format format(Fp8Operand operand) const {
    return formats == Fp8Formats::hybrid && operand == Fp8Operand::grad_output ? Fp8Format::e5m2
                                                                               : Fp8Format::e4m3;
  }
  bool operator==(const Fp8Settings&) const = default;
};

}  // namespace strata
