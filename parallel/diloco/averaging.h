// How DiLoCo workers average their outer gradients (diloco.averaging, docs/ARCHITECTURE.md §3):
// the enum, its words, and their parsing (parallel/diloco/worker_averaging.h implements each).
#pragma once

#include <string>

#include "model/core/choice.h"

namespace strata {

enum class Averaging { all_reduce, butterfly, gossip, moshpit };
inline constexpr Choices kAveragingChoices{std::array{
    ChoiceWord{Averaging::all_reduce, "all_reduce"}, ChoiceWord{Averaging::butterfly, "butterfly"},
    ChoiceWord{Averaging::gossip, "gossip"}, ChoiceWord{Averaging::moshpit, "moshpit"}}};
// "all_reduce" | "butterfly" | "gossip" | "moshpit" (diloco.averaging); else an Error.
Averaging averaging_from_name(const std::string& name);

}  // namespace strata
