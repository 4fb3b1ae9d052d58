// GPT-2 (DESIGN §5): token + learned position embeddings, n_layer pre-LN blocks
// (LN → causal MHA → residual, LN → MLP 4C with tanh-GELU → residual), final LN, LM head tied to
// wte. Explicit forward and backward; activations are kept for the backward pass.
//
// Gpt<T> owns activation and gradient-scratch memory for up to `max_batch` sequences of up to
// seq_len tokens; parameters and gradients are flat buffers laid out by ParameterLayout and are
// passed in, so the same object serves training (float) and gradient checks (double).
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_shape.h"
#include "model/parameter_layout.h"

namespace strata {

template <class T>
class Gpt {
 public:
  Gpt(const GptShape& shape, int max_batch);

  const GptShape& shape() const { return shape_; }
  const ParameterLayout& layout() const { return layout_; }

  // tokens, targets (B, T_) with T_ <= seq_len. Returns the mean cross-entropy over the B·T_
  // targets; per-position losses stay available through losses(). targets may be null (then
  // only logits are computed and the return value is 0).
  T forward(const T* params, const std::int32_t* tokens, const std::int32_t* targets, int B,
            int T_);

  // Backward of the last forward (which must have had targets). Gradients are accumulated into
  // grads (+=) for d(loss_scale · mean loss)/d(params).
  void backward(const T* params, T* grads, T loss_scale);

  // After a forward: logits (B, T_, Vp) of the last forward when it had no targets;
  // softmax probabilities when it had targets.
  const T* logits() const { return logits_.data(); }
  const T* losses() const { return losses_.data(); }

 private:
  struct Block;
  Block block_params(const T* base, int layer) const;

  GptShape shape_;
  ParameterLayout layout_;
  int max_batch_;
  // Saved forward state of the last call.
  int batch_ = 0;
  int time_ = 0;
  bool has_targets_ = false;
  std::vector<std::int32_t> saved_tokens_;
  std::vector<std::int32_t> saved_targets_;
  // Activations: per layer l, residual_[l] is the block input (B, T, C); residual_[L] feeds lnf.
  std::vector<T> residual_;   // (L+1, B, T, C)
  std::vector<T> residual2_;  // (L, B, T, C)  after the attention residual add
  std::vector<T> ln1_, ln2_;  // (L, B, T, C)
  std::vector<T> ln1_mean_, ln1_rstd_, ln2_mean_, ln2_rstd_;  // (L, B, T)
  std::vector<T> qkv_;                                        // (L, B, T, 3C)
  std::vector<T> atty_;                                       // (L, B, T, C)
  std::vector<T> att_;                                        // (L, B, NH, T, T)
  std::vector<T> fch_, fch_gelu_;                             // (L, B, T, 4C)
  std::vector<T> lnf_, lnf_mean_, lnf_rstd_;                  // (B, T, C), (B, T)
  std::vector<T> logits_;  // (B, T, Vp), probabilities after a forward with targets
  std::vector<T> losses_;  // (B, T)
  // Backward scratch.
  std::vector<T> dresidual_, dln_, datty_, dqkv_, dfch_, dlosses_, scratch_;
};

extern template class Gpt<float>;
extern template class Gpt<double>;

}  // namespace strata
