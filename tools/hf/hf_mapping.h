// What every Hugging Face model family shares when it maps Strata's parameters to its tensors and
// back (the families themselves: tools/hf/hf_gpt2.h, tools/hf/hf_llama.h).
//
// A family maps each Strata tensor of ParameterLayout::for_gpt(shape) to one or more pieces: a
// Hugging Face tensor holding a block of the Strata tensor's rows (dimension 0), as is or
// transposed. GPT-2 has one piece per tensor (block weights transposed into Conv1D's [in, out]);
// Llama splits the fused attention qkv into q_proj, k_proj and v_proj and SwiGLU's fused gate and
// up into gate_proj and up_proj. Both keep only the real vocabulary rows of wte (and lm_head), so
// Strata's padding rows are dropped on export and zero on import.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/parameter_layout.h"
#include "tools/hf/safetensors.h"

namespace strata {

struct HfPiece {
  std::string name;            // the Hugging Face tensor, as the family writes it
  std::int64_t row_begin = 0;  // its rows [row_begin, row_begin + rows) of the Strata tensor
  std::int64_t rows = 0;
  bool transposed = false;  // a 2-D piece stored [in, out] (GPT-2's Conv1D)
};

// The pieces of one Strata tensor, in order. Error for a tensor the family has no name for.
using HfPieces = std::function<std::vector<HfPiece>(const TensorView&)>;

// How a family reads a file's tensors.
struct HfReading {
  std::string family;  // "GPT-2", "Llama": messages say "not part of a <family> model with ..."
  int layers = 0;      // ... "<layers> layers"
  // The prefix of the names the family writes ("transformer.", "model."): a name without it, as
  // the family's bare model saves them (GPT2Model, LlamaModel), is read as with it. The head,
  // lm_head.weight, has none.
  std::string prefix;
  // A tensor to ignore, by its name without the prefix: buffers that are not parameters.
  std::function<bool(const std::string&)> ignored;
  // With a tied head: a stored lm_head.weight must equal the piece `embedding`, and is then
  // ignored; `untied_error` ends the message when it differs.
  bool tied_head = false;
  std::string embedding, untied_error;
};

// The Hugging Face tensors (F32, in layout order) of `params`, laid out by `layout`.
std::vector<SafetensorsTensor> hf_tensors_of(const ParameterLayout& layout,
                                             const std::vector<float>& params,
                                             const HfPieces& pieces);

// The inverse: the parameters of `layout` (rows no piece covers zero) from a file's tensors.
// Error naming `origin` and the tensor on a missing, unknown, duplicated or misshapen tensor, or
// on a tied head that differs from the embedding.
std::vector<float> params_from_hf_tensors(const ParameterLayout& layout,
                                          const std::vector<SafetensorsTensor>& tensors,
                                          const HfPieces& pieces, const HfReading& reading,
                                          const std::string& origin);

// "[rows, cols]".
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace strata
