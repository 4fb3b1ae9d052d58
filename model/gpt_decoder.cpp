#include "model/gpt_decoder.h"

#include <string>

#include "model/core/error.h"
#include "model/gpt_norm.h"

namespace strata {

template <class T>
GptDecoder<T>::GptDecoder(const Gpt<T>& model, const T* params)
    : shape_(model.shape()), ops_(cpu::ComputeDtype::fp32) {
  STRATA_CHECK(model.partition() == ModelPartition::whole(shape_),
               "incremental decoding runs the whole model in one process");
  STRATA_CHECK(model.options().compute == cpu::ComputeDtype::fp32,
               "incremental decoding computes without mixed-precision rounding");
  const ParameterLayout& layout = model.layout();
  // The whole model's layout: a tensor's offset is its place in `params`.
  auto at = [&](const std::string& name) {
    return layout.has(name) ? params + layout.at(name).offset : nullptr;
  };
  wte_ = at("wte");
  wpe_ = at("wpe");  // null with rotary positions
  head_ = shape_.arch.tie_embeddings ? wte_ : at("lm_head.weight");
  lnf_weight_ = at("lnf.weight");
  lnf_bias_ = at("lnf.bias");  // null without biases
  if (shape_.moe.enabled()) {
    MoeConfig dropless = shape_.moe;
    dropless.capacity_factor = 0;
    moe_ = std::make_unique<MoeLayer<T>>(shape_.expert_shape(), dropless);
  }
  const std::vector<ParameterSegment>& segments = model.segments();
  const SegmentIndex index = segment_index(segments);
  for (int l = 0; l < shape_.n_layer; ++l) {
    const ParameterSegment& segment = segments[static_cast<std::size_t>(index.block(l))];
    blocks_.emplace_back(params + segment.range.begin,
                         BlockOffsets::of(layout, segment, l, shape_.moe.is_moe_block(l)));
  }
  const std::size_t T_max = shape_.seq_len, C = shape_.d_model;
  qkv_cache_.resize(static_cast<std::size_t>(shape_.n_layer) * T_max * shape_.qkv_width());
  for (std::vector<T>* rows : {&x_, &x2_, &ln_, &atty_, &y_}) rows->resize(T_max * C);
  mean_.resize(T_max);
  rstd_.resize(T_max);
  fch_.resize(T_max * shape_.fc_width());
  fch_gelu_.resize(T_max * shape_.ffn_width());
  logits_.resize(static_cast<std::size_t>(shape_.padded_vocab()));
}

template <class T>
typename GptDecoder<T>::Block::Activations GptDecoder<T>::layer(int l) {
  typename Block::Activations a;
  a.x = x_.data();
  a.out = x_.data();  // the block's input is read before its output is written
  a.ln1 = a.ln2 = ln_.data();
  a.x2 = x2_.data();
  a.ln1_mean = a.ln2_mean = mean_.data();
  a.ln1_rstd = a.ln2_rstd = rstd_.data();
  a.qkv = qkv_cache_.data() + static_cast<std::size_t>(l) * shape_.seq_len * shape_.qkv_width();
  a.atty = atty_.data();
  a.cache_begin = length_;
  if (shape_.moe.is_moe_block(l)) {
    a.moe = &moe_rows_;
  } else {
    a.fch = fch_.data();
    a.fch_gelu = fch_gelu_.data();
  }
  return a;
}

// The same ops, in the same order, as Gpt's forward (one process, fp32), on the n new rows only;
// the head runs on the last row alone.
template <class T>
const T* GptDecoder<T>::append(const std::int32_t* tokens, int n) {
  STRATA_CHECK(n >= 1 && length_ + n <= shape_.seq_len, "appending ", n, " positions to ", length_,
               " exceeds the context of ", shape_.seq_len);
  for (int i = 0; i < n; ++i)
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
  const int C = shape_.d_model, Vp = shape_.padded_vocab();
  // (n, C) at positions [length_, length_ + n)
  ops_.embedding_forward(x_.data(), tokens, wte_, VocabShard{0, Vp, shape_.vocab_size}, n, C);
  if (wpe_ != nullptr)
    ops_.position_embedding_forward(x_.data(), wpe_, length_, n, shape_.seq_len, C);
  // y_ takes the projections' outputs; one rank: no sums, no gathers, no backward buffers.
  Block block(ops_, moe_.get(), nullptr, GptBlockDims(shape_, ModelPartition::whole(shape_)),
              Recompute::none, {y_.data(), nullptr, nullptr, nullptr, nullptr, nullptr});
  for (int l = 0; l < shape_.n_layer; ++l)
    block.forward(layer(l), 1, n, blocks_[static_cast<std::size_t>(l)]);
  length_ += n;
  const T* last = x_.data() + static_cast<long>(n - 1) * C;
  GptNorm<CpuOps<T>>{ops_, shape_.arch.norm, shape_.arch.norm_eps}.forward(
      ln_.data(), mean_.data(), rstd_.data(), last, lnf_weight_, lnf_bias_, 1, C);
  // (1, Vp), the head tied to wte or lm_head
  ops_.matmul_forward(logits_.data(), nullptr, ln_.data(), head_, nullptr, 1, C, Vp, Epilogue::bias,
                      Fp8Gemm{});
  return logits_.data();
}

template class GptDecoder<float>;
template class GptDecoder<double>;

}  // namespace strata
