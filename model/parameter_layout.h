// Named views into the flat parameter buffer. Parameters, gradients and optimizer moments share
// this layout, so bucketing, sharding and checkpoint slicing are index arithmetic.
// Names and shapes are the checkpoint contract of DESIGN §5 (weights [out, in]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_shape.h"

namespace strata {

struct TensorView {
  std::string name;                 // e.g. "h.0.attn.qkv.weight" (checkpoint path /model/<name>)
  std::vector<std::int64_t> shape;  // logical shape, row-major
  std::size_t offset = 0;           // first element in the flat buffer
  std::size_t size = 0;             // number of elements
  bool decay = false;               // AdamW weight decay applies (2-D weights only)
};

class ParameterLayout {
 public:
  static ParameterLayout for_gpt(const GptShape& shape);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView& at(const std::string& name) const;  // Error if absent
  std::size_t total() const { return total_; }

 private:
  void add(std::string name, std::vector<std::int64_t> shape, bool decay);
  std::vector<TensorView> tensors_;
  std::size_t total_ = 0;
};

// GPT-2 initialisation as a pure function of (seed, parameter name, element index), so it is the
// same under any layout: weights N(0, 0.02), residual projections (attn.proj, mlp.proj weights)
// N(0, 0.02/√(2·n_layer)), biases 0, LayerNorm weights 1, padded vocabulary rows 0.
void initialize_gpt_parameters(const ParameterLayout& layout, const GptShape& shape,
                               std::uint64_t seed, float* params);

}  // namespace strata
