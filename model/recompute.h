// What the backward pass recomputes instead of keeping from the forward (the `recompute` config
// key, docs/ARCHITECTURE.md §3): the enum, its words, and their parsing.
#pragma once

#include <string_view>

#include "model/core/choice.h"

namespace strata {

enum class Recompute { none, selective, full };
inline constexpr Choices kRecomputeChoices{std::array{ChoiceWord{Recompute::none, "none"},
                                                      ChoiceWord{Recompute::selective, "selective"},
                                                      ChoiceWord{Recompute::full, "full"}}};
// "none" | "selective" | "full" (the words of the `recompute` config key); else an Error.
Recompute recompute_from_name(std::string_view name);
// The inverse: the config word of `recompute`.
const char* recompute_name(Recompute recompute);

}  // namespace strata
