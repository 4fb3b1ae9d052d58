// The training state both backends hold (train/backend/cpu_training.h,
// train/backend/cuda_training.h), named and windowed once (docs/ARCHITECTURE.md §5): a checkpoint's
// buffers are "model", the fp32 master weights over the reduction plan's parameter range, and
// "optimizer/<moment>", each optimizer moment over the plan's owned range; DiLoCo's outer step
// reads and writes windows of the master weights. Each backend only moves the values (host vectors,
// or device arrays).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/core/element_range.h"
#include "model/fp8/fp8_state.h"
#include "train/checkpoint/checkpoint.h"
#include "train/optimizer/optimizer.h"

namespace strata {

// The prefix of the optimizer's buffers' names.
inline const std::string kOptimizerPrefix = "optimizer/";

// The moments of the AdamW optimizer (train/optimizer/optimizer.h), in the order of its state().
inline const std::vector<std::string> kAdamWMoments = {"m", "v"};

// The buffers a backend holds, with empty values: "model" over `parameters`, then
// "optimizer/<moment>" over `owned` for each of `moments`.
std::vector<StateBuffer> state_buffers(ElementRange parameters, ElementRange owned,
                                       const std::vector<std::string>& moments);
// "model" over `parameters`, then an optimizer's buffers (Optimizer::shapes) as
// "optimizer/<name>".
std::vector<StateBuffer> state_buffers(ElementRange parameters,
                                       const std::vector<StateBuffer>& optimizer);

// The FP8 delayed recipe's amax histories (model/fp8/fp8_state.h), a per-tensor buffer of this
// name: one statistic per FP8 GEMM of the rank's models, named by its weight tensor. Optional: a
// GEMM whose histories a checkpoint lacks (or holds for another fp8_history) resumes with empty
// ones (zeros).
inline const std::string kFp8HistoryBuffer = "fp8/amax_history";
// The buffer of `states` (the rank's models' FP8 states, in chunk order; null entries skipped)
// with their values; nullopt when none keeps histories.
std::optional<StateBuffer> fp8_history_buffer(const std::vector<Fp8State*>& states,
                                              const ParameterLayout& layout);
// The histories from `buffer` (fp8_history_buffer's shape).
void set_fp8_histories(const std::vector<Fp8State*>& states, const StateBuffer& buffer);

// The index in `held` (state_buffers) of the buffer `given` names; an error naming it unless its
// name, range (or statistics) and number of values match one of them (`backend` names the backend
// in it).
std::size_t match_state_buffer(const std::vector<StateBuffer>& held, const StateBuffer& given,
                               std::string_view backend);

// The part of a window `range` of the layout that master weights over `held` hold: `count`
// elements, from `held_at` in the backend's buffer and from `window_at` in the window's array
// (count 0 when the two do not meet).
struct WindowPart {
  std::size_t held_at = 0, window_at = 0, count = 0;
};
WindowPart window_part(ElementRange range, ElementRange held);

}  // namespace strata
