// How a model reaches its weights and gradients: segment by segment (ParameterSegment of its
// layout), so that a sharded run can gather a segment's weights just before they are used and
// free them after (ZeRO stage 3), and reduce a segment's gradients as soon as a backward pass has
// written the last of them (ZeRO stage 2). Unsharded runs hand the model flat buffers
// (FlatParameters), and a segment is then just a pointer into them.
//
// The model's calls, per pass: acquire_weights(s) before a segment's weights are read and
// release_weights(s) after (forward: each segment in turn; backward: again, recomputation
// included); acquire_gradients(s) before it adds a segment's gradients and release_gradients(s)
// once it has added the last of them in this backward pass. Every acquire has one release.
#pragma once

#include <vector>

#include "model/core/error.h"
#include "model/parameter_layout.h"

namespace strata {

// Which pass reads the weights: ZeRO++ gathers them differently for each (quantised for the
// forward, from the node's secondary copy for the backward and its recomputation).
enum class WeightUse { forward, backward };

// W: the weights' element type (the compute dtype), G: the gradients' (the CPU model uses one T
// for both; the CUDA model reads bf16/fp16 weights and adds fp32 gradients).
template <class W, class G = W>
class ParameterAccess {
 public:
  virtual ~ParameterAccess() = default;
  // Segment `index` (of layout.segments()) from its first element, valid until its release.
  virtual const W* acquire_weights(int index, WeightUse use) = 0;
  virtual void release_weights(int index) = 0;
  // Where the backward pass adds segment `index`'s gradients (+=), from its first element.
  virtual G* acquire_gradients(int index) = 0;
  virtual void release_gradients(int index) = 0;
};

// Flat buffers laid out by the layout whose segments these are; gradients may be null (forward
// only).
template <class W, class G = W>
class FlatParameters final : public ParameterAccess<W, G> {
 public:
  FlatParameters(const std::vector<ParameterSegment>& segments, const W* weights, G* gradients)
      : segments_(segments), weights_(weights), gradients_(gradients) {}

  const W* acquire_weights(int index, WeightUse) override { return weights_ + begin(index); }
  void release_weights(int) override {}
  G* acquire_gradients(int index) override {
    STRATA_CHECK(gradients_ != nullptr, "a backward pass without a gradient buffer");
    return gradients_ + begin(index);
  }
  void release_gradients(int) override {}

 private:
  std::size_t begin(int index) const {
    return segments_.at(static_cast<std::size_t>(index)).range.begin;
  }
  const std::vector<ParameterSegment>& segments_;
  const W* weights_;
  G* gradients_;
};

}  // namespace strata
