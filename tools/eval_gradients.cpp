#include "tools/eval_gradients.h"

#include <cstdio>
#include <memory>

#include "data/loader.h"
#include "model/core/error.h"
#include "tools/hf/safetensors.h"
#include "train/evaluate.h"

namespace strata {

EvalGradients eval_gradients(Gpt<float>& model, const float* params, const TokenSource& split,
                             std::int64_t n_tokens, int micro_batch) {
  // MoE blocks: the backward adds the router losses' gradients (weights aux_loss and z_loss) to
  // the cross-entropy's; a model of the same shape with both weights 0 adds none and routes alike.
  std::unique_ptr<Gpt<float>> without_router_losses;
  Gpt<float>* used = &model;
  if (model.shape().moe.enabled()) {
    GptShape shape = model.shape();
    shape.moe.aux_loss = 0;
    shape.moe.z_loss = 0;
    without_router_losses = std::make_unique<Gpt<float>>(shape, micro_batch);
    used = without_router_losses.get();
  }
  const int T = model.shape().seq_len;
  const auto batches = eval_batches(split, n_tokens, T, micro_batch, 0, 1);
  EvalGradients result;
  for (const auto& batch : batches) result.windows += static_cast<std::int64_t>(batch.size());
  result.grads.assign(used->layout().total(), 0.0f);
  forward_windows(
      *used, params, batches,
      [&](std::uint64_t w, std::int32_t* inputs, std::int32_t* targets) {
        eval_window(split, w, T, inputs, targets);
      },
      // Summed in double, window by window, as evaluate_loss sums: the same val_loss to the bit.
      [&](std::uint64_t, const float* losses) {
        for (int i = 0; i < T; ++i) result.loss += losses[i];
      },
      // d(mean over all targets) = Σ over passes of (B / windows) · d(the pass's mean).
      [&](const std::vector<std::uint64_t>& windows) {
        used->backward(params, result.grads.data(),
                       static_cast<float>(windows.size()) / static_cast<float>(result.windows));
      });
  result.targets = result.windows * T;
  if (result.targets > 0) result.loss /= static_cast<double>(result.targets);
  return result;
}

void write_eval_gradients(const std::string& path, const ParameterLayout& layout,
                          const EvalGradients& gradients) {
  STRATA_CHECK(gradients.grads.size() == layout.total());
  std::vector<SafetensorsTensor> tensors;
  for (const TensorView& t : layout.tensors()) {
    const float* begin = gradients.grads.data() + t.offset;
    tensors.push_back({t.name, t.slice.logical_shape, std::vector<float>(begin, begin + t.size)});
  }
  char loss[32];
  std::snprintf(loss, sizeof(loss), "%.17g", gradients.loss);
  try {
    write_safetensors(path, tensors,
                      {{"format", "pt"},
                       {"loss", loss},
                       {"targets", std::to_string(gradients.targets)},
                       {"windows", std::to_string(gradients.windows)}});
  } catch (const Error& e) {
    fail("--gradients: ", e.what());
  }
}

}  // namespace strata
