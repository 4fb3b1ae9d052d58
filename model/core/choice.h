// Enumerated choices and the words that name them (the config's enumerated values,
// docs/ARCHITECTURE.md §3). Each enum has one table of (value, word) pairs, beside the enum's own
// definition; the config reads a word into the enum once, at load, and writes the enum back as
// its word, so no code past the config compares strings to choose among an enum's values (the one
// string key, precision.loss_scale, `dynamic` or a number, is read where it acts).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

template <class E>
struct ChoiceWord {
  E value;
  std::string_view word;
};
// Spelled out: clang before 17 deduces no class template arguments for aggregates by itself.
template <class E>
ChoiceWord(E, const char*) -> ChoiceWord<E>;

template <class E, std::size_t N>
struct Choices {
  std::array<ChoiceWord<E>, N> entries;

  // The value named `word` (exact, case-sensitive), or nothing.
  constexpr std::optional<E> find(std::string_view word) const {
    for (const auto& entry : entries)
      if (entry.word == word) return entry.value;
    return std::nullopt;
  }

  // The word of `value`; every value of E has one in the table.
  constexpr std::string_view word(E value) const {
    for (const auto& entry : entries)
      if (entry.value == value) return entry.word;
    return "?";
  }

  std::vector<std::string> words() const {
    std::vector<std::string> out;
    for (const auto& entry : entries) out.emplace_back(entry.word);
    return out;
  }

  // "a, b or c", for messages.
  std::string list() const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += entries[i].word;
    }
    return out;
  }
};

template <class E, std::size_t N>
Choices(std::array<ChoiceWord<E>, N>) -> Choices<E, N>;

}  // namespace strata
