// Which expert computes which token (model/moe/moe_config.h): from every token's top-k choices,
// the capacity rule and the permutation that groups the kept assignments by expert. A pure
// function of the choices, so every layout that gathers a group's choices drops the same tokens.
//
// Capacity, per group of `group_tokens` consecutive tokens (whole sequences): experts take
// assignments in claim order, all first choices of the group in token order, then all second
// choices, ... (GShard); an assignment beyond its expert's capacity is dropped (the token's MLP
// output lacks that expert's part: with every choice dropped it passes through the residual
// alone).
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

struct MoeRouting {
  int tokens = 0, top_k = 0, experts = 0;
  std::vector<int> expert;  // (tokens, top_k): the expert of each choice
  std::vector<char> kept;   // (tokens, top_k): 1 when within its expert's capacity
  // The kept assignments (token · top_k + choice) grouped by expert: expert e's are
  // assignments[offsets[e] .. offsets[e + 1]), in token order.
  std::vector<int> offsets;
  std::vector<int> assignments;

  int assigned(int e) const { return offsets[e + 1] - offsets[e]; }
  std::int64_t dropped() const {
    return static_cast<std::int64_t>(tokens) * top_k -
           static_cast<std::int64_t>(assignments.size());
  }
};

// `choices` (tokens, top_k): each token's experts, best first. capacity < 0: unlimited.
// tokens must be a multiple of group_tokens.
MoeRouting route_tokens(const int* choices, int tokens, int top_k, int experts, int group_tokens,
                        std::int64_t capacity);

// The tokens of one capacity group of a micro-batch of `tokens` (whole sequences of seq_len):
// group_sequences sequences, or all of them when group_sequences does not divide their number
// (an evaluation's last micro-batch).
int capacity_group_tokens(int tokens, int seq_len, int group_sequences);

// The load-balancing loss's f_e (E): the share of the tokens · top_k choices that picked each
// expert, before capacity, summed in choice order (so every backend gets the same doubles).
std::vector<double> chosen_shares(const int* choices, int tokens, int top_k, int experts);

}  // namespace strata
