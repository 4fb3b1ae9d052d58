// The layout's tensors as an optimizer with per-tensor state sees them (Adafactor's factored
// statistics, AdamW8bit's block scales, Muon's matrices): each tensor's elements in the layout, the
// part of them in the optimizer's range, and whether tensor parallelism splits it (its per-tensor
// figures are then summed over the tp group too). Written once for the three.
#pragma once

#include <vector>

#include "model/core/element_range.h"
#include "model/parameter_layout.h"

namespace strata {

struct TensorPart {
  const TensorView* view = nullptr;  // the layout's (valid while the layout is)
  ElementRange elements;             // the tensor's elements in the layout
  ElementRange held;                 // of them, those in the optimizer's range (maybe none)
  bool split = false;                // sliced over tp

  bool matrix() const { return view->slice.logical_shape.size() == 2; }
};

// The order of the parts: the order in which an optimizer reduces its per-tensor sums, so that
// every reduction is one contiguous section (layout: layout order; whole_first: the whole tensors,
// then the split ones; wte_whole_split: the tied wte alone first, then the other whole tensors,
// then the split ones). Within a section, layout order.
enum class TensorOrder { layout, whole_first, wte_whole_split };

std::vector<TensorPart> tensor_parts(const ParameterLayout& layout, ElementRange range,
                                     TensorOrder order);

}  // namespace strata
