// `eval --gradients FILE.safetensors`: the gradient of eval's val_loss, the mean cross-entropy over
// the evaluation windows of docs/ARCHITECTURE.md §5 (train/evaluate.h), with respect to every
// parameter, for comparison with another implementation (tools/torch_reference.py checks it
// against PyTorch's autograd on the same weights and windows).
//
// The file is safetensors (tools/hf/safetensors.h), fp32, one tensor per checkpoint tensor named
// as the checkpoint's (/model/<name> → <name>), in the checkpoint's order, with its logical shape:
// wte and an untied lm_head keep their padded vocabulary rows (whose gradient is zero: they are
// never looked up and never in the softmax). Its metadata says what was differentiated: "loss"
// (the mean, %.17g), "targets" and "windows".
//
// The gradient is the model's own backward (model/gpt.h) over the forward passes eval makes: the
// same windows in the same micro-batches, each micro-batch of B windows backward with loss scale
// B / windows, so that the sum over micro-batches is the gradient of the mean over all targets (as
// train's step scales each micro-batch by 1 / micro-batches; here the last may hold fewer windows).
// With mixture-of-experts blocks the router's auxiliary losses, which training adds to the
// gradient, are left out: the gradient is val_loss's alone.
#pragma once

#include <cstdint>
#include <string>

#include "data/token_shards.h"
#include "model/gpt.h"

namespace strata {

struct EvalGradients {
  double loss = 0;           // val_loss: the mean cross-entropy the gradient is of
  std::int64_t targets = 0;  // its targets
  std::int64_t windows = 0;  // its windows of seq_len targets
  std::vector<float> grads;  // d loss / d params, in model.layout()'s order
};

// The gradient of the mean cross-entropy over the windows of the first n_tokens of `split`,
// micro_batch windows per forward and backward (`model`'s max_batch at least micro_batch).
EvalGradients eval_gradients(Gpt<float>& model, const float* params, const TokenSource& split,
                             std::int64_t n_tokens, int micro_batch);

// Writes `gradients` as FILE.safetensors with the checkpoint's tensor names and logical shapes.
void write_eval_gradients(const std::string& path, const ParameterLayout& layout,
                          const EvalGradients& gradients);

}  // namespace strata
