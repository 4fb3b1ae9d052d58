// When ZeRO stages 2 and 3 reduce-scatter a segment's gradients (parallel.zero.gradient_reduction,
// docs/ARCHITECTURE.md §3): the enum, its words, and their parsing.
#pragma once

#include <string>

#include "model/core/choice.h"

namespace strata {

enum class GradientReduction { step, micro_batch };
inline constexpr Choices kGradientReductionChoices{
    std::array{ChoiceWord{GradientReduction::step, "step"},
               ChoiceWord{GradientReduction::micro_batch, "micro_batch"}}};
// "step" | "micro_batch" (the words of parallel.zero.gradient_reduction); else an Error.
GradientReduction gradient_reduction_from_name(const std::string& name);

}  // namespace strata
