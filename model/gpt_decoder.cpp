#include "model/gpt_decoder.h"

#include <string>

#include "model/core/error.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/residual.h"
#include "model/kernels/cpu/vocab_parallel.h"

namespace strata {

using namespace cpu;

template <class T>
GptDecoder<T>::GptDecoder(const Gpt<T>& model, const T* params) : shape_(model.shape()) {
  STRATA_CHECK(model.partition() == ModelPartition::whole(shape_),
               "incremental decoding runs the whole model in one process");
  STRATA_CHECK(model.options().compute == ComputeDtype::fp32,
               "incremental decoding computes without mixed-precision rounding");
  const ParameterLayout& layout = model.layout();
  // The whole model's layout: a tensor's offset is its place in `params`.
  auto at = [&](const std::string& name) { return params + layout.at(name).offset; };
  wte_ = at("wte");
  wpe_ = at("wpe");
  lnf_weight_ = at("lnf.weight");
  lnf_bias_ = at("lnf.bias");
  if (shape_.moe.enabled()) {
    MoeConfig dropless = shape_.moe;
    dropless.capacity_factor = 0;
    moe_ = std::make_unique<MoeLayer<T>>(shape_.d_model, dropless);
  }
  for (int l = 0; l < shape_.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const bool moe = shape_.moe.is_moe_block(l);
    const auto mlp = [&](const char* name) { return moe ? nullptr : at(h + "mlp." + name); };
    blocks_.push_back(Block{at(h + "ln1.weight"), at(h + "ln1.bias"), at(h + "attn.qkv.weight"),
                            at(h + "attn.qkv.bias"), at(h + "attn.proj.weight"),
                            at(h + "attn.proj.bias"), at(h + "ln2.weight"), at(h + "ln2.bias"),
                            mlp("fc.weight"), mlp("fc.bias"), mlp("proj.weight"), mlp("proj.bias"),
                            moe ? at(h + "moe.router.weight") : nullptr});
  }
  const std::size_t T_max = shape_.seq_len, C = shape_.d_model;
  qkv_cache_.resize(static_cast<std::size_t>(shape_.n_layer) * T_max * 3 * C);
  for (std::vector<T>* rows : {&x_, &x2_, &ln_, &atty_, &y_}) rows->resize(T_max * C);
  mean_.resize(T_max);
  rstd_.resize(T_max);
  fch_.resize(T_max * 4 * C);
  fch_gelu_.resize(T_max * 4 * C);
  logits_.resize(static_cast<std::size_t>(shape_.padded_vocab()));
}

// The same ops, in the same order, as Gpt's embedding, block_forward and head_forward (one
// process, fp32), on the n new rows only; the head runs on the last row alone.
template <class T>
const T* GptDecoder<T>::append(const std::int32_t* tokens, int n) {
  STRATA_CHECK(n >= 1 && length_ + n <= shape_.seq_len, "appending ", n, " positions to ", length_,
               " exceeds the context of ", shape_.seq_len);
  for (int i = 0; i < n; ++i)
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
  const int C = shape_.d_model, Vp = shape_.padded_vocab();
  // (n, C) at positions [length_, length_ + n)
  embedding_shard_forward(x_.data(), tokens, wte_, 0, Vp, n, C);
  position_embedding_forward(x_.data(), wpe_, length_, n, shape_.seq_len, C);
  const long per_layer = static_cast<long>(shape_.seq_len) * 3 * C;
  for (int l = 0; l < shape_.n_layer; ++l)
    block_forward(blocks_[l], qkv_cache_.data() + l * per_layer, n);
  length_ += n;
  const T* last = x_.data() + static_cast<long>(n - 1) * C;
  layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), last, lnf_weight_, lnf_bias_, 1, C);
  // (1, Vp), the head tied to wte
  matmul_forward(logits_.data(), ln_.data(), wte_, static_cast<const T*>(nullptr), 1, C, Vp);
  return logits_.data();
}

// x_ (n, C) ← x_ + attention + MLP, the new rows' qkv written into the cache at rows
// [length_, length_ + n) of `qkv_cache` (seq_len, 3C).
template <class T>
void GptDecoder<T>::block_forward(const Block& p, T* qkv_cache, int n) {
  const int C = shape_.d_model, H = 4 * C, t0 = length_;
  // Attention: x2 = x + proj(attn(qkv(ln1(x))))
  layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data(), p.ln1_weight, p.ln1_bias, n,
                    C);
  matmul_forward(qkv_cache + static_cast<long>(t0) * 3 * C, ln_.data(), p.qkv_weight, p.qkv_bias, n,
                 C, 3 * C);                                                       // (n, 3C)
  attention_forward_rows(atty_.data(), qkv_cache, t0, t0 + n, C, shape_.n_head);  // (n, C)
  matmul_forward(y_.data(), atty_.data(), p.attn_proj_weight, static_cast<const T*>(nullptr), n, C,
                 C);
  residual_layernorm_forward(x2_.data(), ln_.data(), mean_.data(), rstd_.data(), x_.data(),
                             y_.data(), p.attn_proj_bias, p.ln2_weight, p.ln2_bias, n, C,
                             ComputeDtype::fp32);
  if (p.moe != nullptr) {  // the experts: next = x2 + moe(ln2(x2)), the n rows one group
    moe_->forward(moe_rows_, ln_.data(), n, n, p.moe, y_.data());
    residual_bias_forward(x_.data(), x2_.data(), y_.data(), static_cast<const T*>(nullptr), n, C);
    return;
  }
  // MLP: next = x2 + proj(gelu(fc(ln2(x2))))
  matmul_forward(fch_.data(), ln_.data(), p.fc_weight, static_cast<const T*>(nullptr), n, C, H);
  bias_gelu_forward(fch_gelu_.data(), fch_.data(), p.fc_bias, n, H, ComputeDtype::fp32);  // (n, 4C)
  matmul_forward(y_.data(), fch_gelu_.data(), p.mlp_proj_weight, static_cast<const T*>(nullptr), n,
                 H, C);
  residual_bias_forward(x_.data(), x2_.data(), y_.data(), p.mlp_proj_bias, n, C);
}

template class GptDecoder<float>;
template class GptDecoder<double>;

}  // namespace strata
