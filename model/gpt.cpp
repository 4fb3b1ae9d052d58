#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "model/core/error.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/crossentropy.h"
#include "model/kernels/cpu/embedding.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"

namespace strata {

using namespace cpu;

template <class T>
struct Gpt<T>::Block {
  const T *ln1_weight, *ln1_bias, *qkv_weight, *qkv_bias, *attn_proj_weight, *attn_proj_bias;
  const T *ln2_weight, *ln2_bias, *fc_weight, *fc_bias, *mlp_proj_weight, *mlp_proj_bias;
};

namespace {
// Pointer to a named tensor inside a flat buffer laid out by `layout` (const or mutable).
template <class P>
P* view(P* base, const ParameterLayout& layout, const std::string& name) {
  return base + layout.at(name).offset;
}

template <class T>
void add_into(T* out, const T* a, const T* b, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
}  // namespace

template <class T>
Gpt<T>::Gpt(const GptShape& shape, int max_batch)
    : shape_(shape), layout_(ParameterLayout::for_gpt(shape)), max_batch_(max_batch) {
  STRATA_CHECK(max_batch > 0 && shape.d_model % shape.n_head == 0);
  const std::size_t L = shape.n_layer;
  const std::size_t BT = static_cast<std::size_t>(max_batch) * shape.seq_len;
  const std::size_t C = shape.d_model;
  residual_.resize((L + 1) * BT * C);
  residual2_.resize(L * BT * C);
  ln1_.resize(L * BT * C);
  ln2_.resize(L * BT * C);
  ln1_mean_.resize(L * BT);
  ln1_rstd_.resize(L * BT);
  ln2_mean_.resize(L * BT);
  ln2_rstd_.resize(L * BT);
  qkv_.resize(L * BT * 3 * C);
  atty_.resize(L * BT * C);
  att_.resize(L * max_batch * shape.n_head * static_cast<std::size_t>(shape.seq_len) *
              shape.seq_len);
  fch_.resize(L * BT * 4 * C);
  fch_gelu_.resize(L * BT * 4 * C);
  lnf_.resize(BT * C);
  lnf_mean_.resize(BT);
  lnf_rstd_.resize(BT);
  logits_.resize(BT * shape.padded_vocab());
  losses_.resize(BT);
  dresidual_.resize(BT * C);
  dln_.resize(BT * C);
  datty_.resize(BT * C);
  dqkv_.resize(BT * 3 * C);
  dfch_.resize(BT * 4 * C);
  dlosses_.resize(BT);
  scratch_.resize(BT * 4 * C);
}

template <class T>
typename Gpt<T>::Block Gpt<T>::block_params(const T* base, int layer) const {
  const std::string h = "h." + std::to_string(layer) + ".";
  return Block{
      view(base, layout_, h + "ln1.weight"),       view(base, layout_, h + "ln1.bias"),
      view(base, layout_, h + "attn.qkv.weight"),  view(base, layout_, h + "attn.qkv.bias"),
      view(base, layout_, h + "attn.proj.weight"), view(base, layout_, h + "attn.proj.bias"),
      view(base, layout_, h + "ln2.weight"),       view(base, layout_, h + "ln2.bias"),
      view(base, layout_, h + "mlp.fc.weight"),    view(base, layout_, h + "mlp.fc.bias"),
      view(base, layout_, h + "mlp.proj.weight"),  view(base, layout_, h + "mlp.proj.bias")};
}

template <class T>
T Gpt<T>::forward(const T* params, const std::int32_t* tokens, const std::int32_t* targets, int B,
                  int T_) {
  STRATA_CHECK(B >= 1 && B <= max_batch_ && T_ >= 1 && T_ <= shape_.seq_len);
  const int C = shape_.d_model, NH = shape_.n_head, V = shape_.vocab_size,
            Vp = shape_.padded_vocab();
  const long BT = static_cast<long>(B) * T_;
  batch_ = B;
  time_ = T_;
  has_targets_ = targets != nullptr;
  saved_tokens_.assign(tokens, tokens + BT);
  if (has_targets_) saved_targets_.assign(targets, targets + BT);
  for (long i = 0; i < BT; ++i)
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < V, "token id out of range");

  // Per-layer strides use the actual B·T so buffers are dense for this call.
  const long stride = BT * C;
  embedding_forward(residual_.data(), tokens, view(params, layout_, "wte"),
                    view(params, layout_, "wpe"), B, T_, C);  // (B, T, C)
  for (int l = 0; l < shape_.n_layer; ++l) {
    const Block p = block_params(params, l);
    T* res = residual_.data() + l * stride;
    T* res2 = residual2_.data() + l * stride;
    T* ln1 = ln1_.data() + l * stride;
    T* ln2 = ln2_.data() + l * stride;
    T* qkv = qkv_.data() + l * 3 * stride;
    T* atty = atty_.data() + l * stride;
    T* att = att_.data() + static_cast<long>(l) * B * NH * T_ * T_;
    T* fch = fch_.data() + l * 4 * stride;
    T* fch_gelu = fch_gelu_.data() + l * 4 * stride;
    T* tmp = scratch_.data();

    layernorm_forward(ln1, ln1_mean_.data() + l * BT, ln1_rstd_.data() + l * BT, res, p.ln1_weight,
                      p.ln1_bias, static_cast<int>(BT), C);  // (B, T, C)
    matmul_forward(qkv, ln1, p.qkv_weight, p.qkv_bias, static_cast<int>(BT), C,
                   3 * C);                            // (B, T, 3C)
    attention_forward(atty, att, qkv, B, T_, C, NH);  // (B, T, C)
    matmul_forward(tmp, atty, p.attn_proj_weight, p.attn_proj_bias, static_cast<int>(BT), C, C);
    add_into(res2, res, tmp, stride);
    layernorm_forward(ln2, ln2_mean_.data() + l * BT, ln2_rstd_.data() + l * BT, res2, p.ln2_weight,
                      p.ln2_bias, static_cast<int>(BT), C);
    matmul_forward(fch, ln2, p.fc_weight, p.fc_bias, static_cast<int>(BT), C, 4 * C);  // (B, T, 4C)
    gelu_forward(fch_gelu, fch, 4 * stride);
    matmul_forward(tmp, fch_gelu, p.mlp_proj_weight, p.mlp_proj_bias, static_cast<int>(BT), 4 * C,
                   C);
    add_into(res + stride, res2, tmp, stride);  // next block's input
  }
  const T* final_residual = residual_.data() + shape_.n_layer * stride;
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), final_residual,
                    view(params, layout_, "lnf.weight"), view(params, layout_, "lnf.bias"),
                    static_cast<int>(BT), C);
  matmul_forward(logits_.data(), lnf_.data(), view(params, layout_, "wte"),
                 static_cast<const T*>(nullptr), static_cast<int>(BT), C,
                 Vp);  // (B, T, Vp), head tied to wte
  if (!has_targets_) return T(0);
  softmax_crossentropy_forward(losses_.data(), logits_.data(), logits_.data(), targets,
                               static_cast<int>(BT), V, Vp);
  T sum = 0;
  for (long i = 0; i < BT; ++i) sum += losses_[i];
  return sum / static_cast<T>(BT);
}

template <class T>
void Gpt<T>::backward(const T* params, T* grads, T loss_scale) {
  STRATA_CHECK(has_targets_, "backward needs a forward with targets");
  const int B = batch_, T_ = time_;
  const int C = shape_.d_model, NH = shape_.n_head, V = shape_.vocab_size,
            Vp = shape_.padded_vocab();
  const long BT = static_cast<long>(B) * T_;
  const int N = static_cast<int>(BT);
  const long stride = BT * C;

  std::fill(dlosses_.begin(), dlosses_.begin() + BT, loss_scale / static_cast<T>(BT));
  // dlogits overwrite the probabilities in place.
  softmax_crossentropy_backward(logits_.data(), logits_.data(), saved_targets_.data(),
                                dlosses_.data(), N, V, Vp);
  matmul_backward(dln_.data(), view(grads, layout_, "wte"), static_cast<T*>(nullptr),
                  logits_.data(), lnf_.data(), view(params, layout_, "wte"), N, C, Vp);
  std::fill(dresidual_.begin(), dresidual_.begin() + stride, T(0));
  layernorm_backward(dresidual_.data(), view(grads, layout_, "lnf.weight"),
                     view(grads, layout_, "lnf.bias"), dln_.data(),
                     residual_.data() + shape_.n_layer * stride,
                     view(params, layout_, "lnf.weight"), lnf_mean_.data(), lnf_rstd_.data(), N, C);

  T* dres = dresidual_.data();  // running d(loss)/d(residual stream)
  for (int l = shape_.n_layer - 1; l >= 0; --l) {
    const Block p = block_params(params, l);
    const std::string h = "h." + std::to_string(l) + ".";
    auto g = [&](const char* name) { return view(grads, layout_, h + name); };
    const T* res = residual_.data() + l * stride;
    const T* res2 = residual2_.data() + l * stride;
    const T* ln1 = ln1_.data() + l * stride;
    const T* ln2 = ln2_.data() + l * stride;
    const T* qkv = qkv_.data() + l * 3 * stride;
    const T* atty = atty_.data() + l * stride;
    const T* att = att_.data() + static_cast<long>(l) * B * NH * T_ * T_;
    const T* fch = fch_.data() + l * 4 * stride;
    const T* fch_gelu = fch_gelu_.data() + l * 4 * stride;
    T* dfch_gelu = scratch_.data();

    // MLP: res_next = res2 + proj(gelu(fc(ln2(res2))))
    matmul_backward(dfch_gelu, g("mlp.proj.weight"), g("mlp.proj.bias"), dres, fch_gelu,
                    p.mlp_proj_weight, N, 4 * C, C);
    gelu_backward(dfch_.data(), fch, dfch_gelu, 4 * stride);
    matmul_backward(dln_.data(), g("mlp.fc.weight"), g("mlp.fc.bias"), dfch_.data(), ln2,
                    p.fc_weight, N, C, 4 * C);
    layernorm_backward(dres, g("ln2.weight"), g("ln2.bias"), dln_.data(), res2, p.ln2_weight,
                       ln2_mean_.data() + l * BT, ln2_rstd_.data() + l * BT, N, C);
    // Attention: res2 = res + proj(attn(qkv(ln1(res))))
    matmul_backward(datty_.data(), g("attn.proj.weight"), g("attn.proj.bias"), dres, atty,
                    p.attn_proj_weight, N, C, C);
    attention_backward(dqkv_.data(), datty_.data(), qkv, att, B, T_, C, NH);
    matmul_backward(dln_.data(), g("attn.qkv.weight"), g("attn.qkv.bias"), dqkv_.data(), ln1,
                    p.qkv_weight, N, C, 3 * C);
    layernorm_backward(dres, g("ln1.weight"), g("ln1.bias"), dln_.data(), res, p.ln1_weight,
                       ln1_mean_.data() + l * BT, ln1_rstd_.data() + l * BT, N, C);
  }
  embedding_backward(view(grads, layout_, "wte"), view(grads, layout_, "wpe"), dres,
                     saved_tokens_.data(), B, T_, C);
  has_targets_ = false;  // the probabilities were overwritten by their gradient
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace strata
