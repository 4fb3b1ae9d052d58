// Streaming DiLoCo's fragments (diloco.fragments F, arXiv 2501.18512): which parameters sync
// together. A contract of the run (a fragment's sync steps and failures are keyed by its index).
//
// The logical model's tensors, in model order (wte, wpe, h.0 …, lnf: ParameterLayout::for_gpt),
// are cut into F contiguous runs of whole tensors balanced by element count: cut k (k = 1 … F−1)
// is the tensor boundary nearest to an even share of what is left, begin_k + (N − begin_k)/(F−k+1)
// elements, with at least one tensor left for every later fragment. So each fragment holds about
// N/F elements, a cut landing within half a tensor of its target, except that wte (first, and
// often the largest tensor) is never cut: when wte alone exceeds N/F, fragment 0 is wte and the
// rest is shared evenly by the others. The peak bytes of one sync are then about
// max(N/F, |wte|) rather than the whole model's.
//
// Fragments are sets of logical tensors, so every layout syncs the same parameters at the same
// step (DiLoCo's layout equivalence holds with streaming), and both pipeline ends sync the tied
// wte in fragment 0. On a rank, a fragment is the range of its layout spanned by the local
// shards of the fragment's tensors: contiguous, since a partition keeps the model order.
#pragma once

#include <cstddef>
#include <vector>

#include "model/core/element_range.h"
#include "model/gpt_shape.h"
#include "model/parameter_layout.h"

namespace strata {

// The fragment of each tensor of ParameterLayout::for_gpt(shape), in that order. Needs
// 1 <= fragments <= the number of tensors.
std::vector<int> diloco_tensor_fragments(const GptShape& shape, int fragments);

// The logical elements of each fragment (the whole model's, under any layout).
std::vector<std::size_t> diloco_fragment_sizes(const GptShape& shape, int fragments);

// Each fragment's range of `local` (a partition of the model of `shape`): empty where the rank
// holds none of its tensors.
std::vector<ElementRange> diloco_fragment_ranges(const ParameterLayout& local,
                                                 const GptShape& shape, int fragments);

}  // namespace strata
