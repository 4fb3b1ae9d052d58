#include "model/gpt.h"

#include <algorithm>
#include <cstring>

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
struct Gpt<T>::Block {
  const T *ln1_weight, *ln1_bias, *qkv_weight, *qkv_bias, *attn_proj_weight, *attn_proj_bias;
  const T *ln2_weight, *ln2_bias, *fc_weight, *fc_bias, *mlp_proj_weight, *mlp_proj_bias;
};

// One micro-batch's saved activations. N = B·T rows in all, Nl = rows of the residual stream on
// this rank; Cl = C/tp channels of this rank's heads, Hl = 4C/tp of its MLP columns, L = layers
// of this stage.
template <class T>
struct Gpt<T>::Slot {
  int batch = 0, time = 0;
  bool has_targets = false;
  bool forwarded = false;
  std::vector<std::int32_t> tokens, targets;  // (N)
  std::vector<T> residual;                    // (L+1, Nl, C): block inputs, then stage output
  std::vector<T> residual2;                   // (L, Nl, C) after the attention residual add
  std::vector<T> ln1, ln2;                    // (L, Nl, C)
  std::vector<T> ln1_full, ln2_full;          // (L, N, C) gathered rows (sequence parallel only)
  std::vector<T> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;  // (L, Nl)
  std::vector<T> qkv;                                     // (L, N, 3Cl)
  std::vector<T> atty;                                    // (L, N, Cl)
  std::vector<T> att;                                     // (L, B, NH/tp, T, T)
  std::vector<T> fch, fch_gelu;                           // (L, N, Hl)
  std::vector<T> lnf, lnf_full, lnf_mean, lnf_rstd;       // (Nl, C), (N, C), (Nl)
  std::vector<T> logits;                                  // (N, Vp/tp)
  std::vector<T> losses;                                  // (N)
  std::vector<T> input_grad;                              // (Nl, C)
};

// Backward and communication scratch shared by all slots.
template <class T>
struct Gpt<T>::Scratch {
  std::vector<T> dresidual;  // (Nl, C)
  std::vector<T> dlocal;     // (Nl, C)
  std::vector<T> dfull;      // (N, C)
  std::vector<T> partial;    // (N, max(C, Hl)): row-parallel partial sums, GELU gradients
  std::vector<T> reduced;    // (Nl, C)
  std::vector<T> datty;      // (N, Cl)
  std::vector<T> dqkv;       // (N, 3Cl)
  std::vector<T> dfch;       // (N, Hl)
  std::vector<T> rows;       // (tp·N) per-row values gathered over the group, (2N) sums
  std::vector<T> dlosses;    // (N)
};

namespace {
// Pointer to a named tensor inside a flat buffer laid out by `layout` (const or mutable).
template <class P>
P* view(P* base, const ParameterLayout& layout, const std::string& name) {
  return base + layout.at(name).offset;
}
}  // namespace

template <class T>
Gpt<T>::Gpt(const GptShape& shape, int max_batch)
    : Gpt(shape, ModelPartition::whole(shape), nullptr, max_batch, 1) {}

template <class T>
Gpt<T>::Gpt(const GptShape& shape, const ModelPartition& partition, Collectives* tp, int max_batch,
            int slots)
    : shape_(shape),
      partition_(partition),
      layout_(ParameterLayout::for_partition(shape, partition)),
      tp_(tp),
      max_batch_(max_batch) {
  STRATA_CHECK(max_batch > 0 && slots > 0 && shape.d_model % shape.n_head == 0);
  if (tp_ == nullptr) {
    STRATA_CHECK(partition.tp_size == 1, "a tensor-parallel partition needs its group");
    single_rank_ = std::make_unique<SingleRank>();
    tp_ = single_rank_.get();
  }
  STRATA_CHECK(tp_->size() == partition.tp_size && tp_->rank() == partition.tp_rank);
  const int tp_size = partition.tp_size;
  STRATA_CHECK(shape.n_head % tp_size == 0 && shape.padded_vocab() % tp_size == 0,
               "tensor parallelism of ", tp_size, " does not divide the heads or the vocabulary");
  sequence_parallel_ = partition.sequence_parallel && tp_size > 1;
  for (int i = 0; i < slots; ++i) slots_.push_back(std::make_unique<Slot>());
  scratch_ = std::make_unique<Scratch>();
  const std::size_t N = static_cast<std::size_t>(max_batch) * shape.seq_len;
  const std::size_t C = shape.d_model, Cl = C / tp_size, Hl = 4 * C / tp_size;
  const std::size_t Nl = sequence_parallel_ ? N / tp_size : N;
  Scratch& x = *scratch_;
  x.dresidual.resize(Nl * C);
  x.dlocal.resize(Nl * C);
  x.dfull.resize(N * C);
  x.partial.resize(N * std::max(C, Hl));
  x.reduced.resize(Nl * C);
  x.datty.resize(N * Cl);
  x.dqkv.resize(N * 3 * Cl);
  x.dfch.resize(N * Hl);
  x.rows.resize(std::max<std::size_t>(tp_size, 2) * N);
  x.dlosses.resize(N);
}

template <class T>
Gpt<T>::~Gpt() = default;
template <class T>
Gpt<T>::Gpt(Gpt&&) noexcept = default;
template <class T>
Gpt<T>& Gpt<T>::operator=(Gpt&&) noexcept = default;

template <class T>
int Gpt<T>::slots() const {
  return static_cast<int>(slots_.size());
}

template <class T>
int Gpt<T>::activation_rows(int B, int T_) const {
  return sequence_parallel_ ? B * T_ / partition_.tp_size : B * T_;
}

template <class T>
typename Gpt<T>::Slot& Gpt<T>::slot_for(int slot, int B, int T_) {
  STRATA_CHECK(slot >= 0 && slot < slots(), "activation slot ", slot, " out of range");
  STRATA_CHECK(B >= 1 && B <= max_batch_ && T_ >= 1 && T_ <= shape_.seq_len);
  STRATA_CHECK(!sequence_parallel_ || (B * T_) % partition_.tp_size == 0,
               "sequence parallelism needs B·T divisible by the tensor-parallel size");
  Slot& s = *slots_[slot];
  if (s.residual.empty()) {  // first use: allocate for the largest micro-batch
    const std::size_t L = partition_.layers(), tp = partition_.tp_size;
    const std::size_t N = static_cast<std::size_t>(max_batch_) * shape_.seq_len;
    const std::size_t C = shape_.d_model, Cl = C / tp, Hl = 4 * C / tp;
    const std::size_t Nl = sequence_parallel_ ? N / tp : N;
    s.residual.resize((L + 1) * Nl * C);
    s.residual2.resize(L * Nl * C);
    s.ln1.resize(L * Nl * C);
    s.ln2.resize(L * Nl * C);
    if (sequence_parallel_) {
      s.ln1_full.resize(L * N * C);
      s.ln2_full.resize(L * N * C);
    }
    s.ln1_mean.resize(L * Nl);
    s.ln1_rstd.resize(L * Nl);
    s.ln2_mean.resize(L * Nl);
    s.ln2_rstd.resize(L * Nl);
    s.qkv.resize(L * N * 3 * Cl);
    s.atty.resize(L * N * Cl);
    s.att.resize(L * max_batch_ * (shape_.n_head / tp) * static_cast<std::size_t>(shape_.seq_len) *
                 shape_.seq_len);
    s.fch.resize(L * N * Hl);
    s.fch_gelu.resize(L * N * Hl);
    if (partition_.has_head) {
      s.lnf.resize(Nl * C);
      if (sequence_parallel_) s.lnf_full.resize(N * C);
      s.lnf_mean.resize(Nl);
      s.lnf_rstd.resize(Nl);
      s.logits.resize(N * shape_.padded_vocab() / tp);
      s.losses.resize(N);
    }
    if (!partition_.has_embedding) s.input_grad.resize(Nl * C);
  }
  s.batch = B;
  s.time = T_;
  return s;
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
const T* Gpt<T>::sum_rows(T* partial, T* local_out, long N, int C) {
  if (!sequence_parallel_) {
    tp_->all_reduce_sum(partial, static_cast<std::size_t>(N) * C);  // no-op for one rank
    return partial;
  }
  tp_->reduce_scatter_sum(partial, local_out, static_cast<std::size_t>(N / tp_->size()) * C);
  return local_out;
}

template <class T>
const T* Gpt<T>::gather_rows(const T* local, T* full, long N, int C) {
  if (!sequence_parallel_) return local;
  tp_->all_gather(local, full, static_cast<std::size_t>(N / tp_->size()) * C);
  return full;
}

template <class T>
T Gpt<T>::forward(int slot, const T* params, const std::int32_t* tokens, const T* input,
                  const std::int32_t* targets, int B, int T_) {
  Slot& s = slot_for(slot, B, T_);
  const long N = static_cast<long>(B) * T_;
  const int C = shape_.d_model;
  s.has_targets = partition_.has_head && targets != nullptr;
  if (partition_.has_embedding) {
    for (long i = 0; i < N; ++i)
      STRATA_CHECK(tokens[i] >= 0 && tokens[i] < shape_.vocab_size, "token id out of range");
    s.tokens.assign(tokens, tokens + N);
  }
  if (s.has_targets) s.targets.assign(targets, targets + N);
  if (partition_.has_embedding) {
    embed(s, params);
  } else {
    STRATA_CHECK(input != nullptr, "a stage after the first needs its input activation");
    std::copy_n(input, static_cast<long>(activation_rows(B, T_)) * C, s.residual.data());
  }
  for (int l = 0; l < partition_.layers(); ++l) block_forward(s, params, l);
  s.forwarded = true;
  return partition_.has_head ? head_forward(s, params) : T(0);
}

template <class T>
void Gpt<T>::embed(Slot& s, const T* params) {
  const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  T* partial = scratch_->partial.data();
  embedding_shard_forward(partial, s.tokens.data(), params + wte.offset,
                          static_cast<int>(wte.slice.mid_begin),
                          static_cast<int>(wte.slice.mid_count), N, C);  // (N, C) partial
  const T* x = sum_rows(partial, s.residual.data(), N, C);               // (Nl, C)
  if (x != s.residual.data()) std::copy_n(x, static_cast<long>(Nl) * C, s.residual.data());
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nl : 0;
  position_embedding_forward(s.residual.data(), view(params, layout_, "wpe"), row_begin, Nl, s.time,
                             C);
}

template <class T>
void Gpt<T>::block_forward(Slot& s, const T* params, int l) {
  const int B = s.batch, T_ = s.time, C = shape_.d_model, tp = partition_.tp_size;
  const int Cl = C / tp, Hl = 4 * C / tp, NHl = shape_.n_head / tp;
  const int N = B * T_, Nl = activation_rows(B, T_);
  const long stride = static_cast<long>(Nl) * C, full = static_cast<long>(N) * C;
  const Block p = block_params(params, partition_.layer_begin + l);
  const T* x = s.residual.data() + l * stride;
  T* x2 = s.residual2.data() + l * stride;
  T* ln1 = s.ln1.data() + l * stride;
  T* ln2 = s.ln2.data() + l * stride;
  T* qkv = s.qkv.data() + l * 3 * static_cast<long>(N) * Cl;
  T* atty = s.atty.data() + l * static_cast<long>(N) * Cl;
  T* att = s.att.data() + static_cast<long>(l) * B * NHl * T_ * T_;
  T* fch = s.fch.data() + l * static_cast<long>(N) * Hl;
  T* fch_gelu = s.fch_gelu.data() + l * static_cast<long>(N) * Hl;
  T* partial = scratch_->partial.data();

  // Attention: x2 = x + proj(attn(qkv(ln1(x))))
  layernorm_forward(ln1, s.ln1_mean.data() + l * Nl, s.ln1_rstd.data() + l * Nl, x, p.ln1_weight,
                    p.ln1_bias, Nl, C);  // (Nl, C)
  const T* ln1_full =
      gather_rows(ln1, sequence_parallel_ ? s.ln1_full.data() + l * full : nullptr, N, C);
  matmul_forward(qkv, ln1_full, p.qkv_weight, p.qkv_bias, N, C, 3 * Cl);  // (N, 3Cl)
  attention_forward(atty, att, qkv, B, T_, Cl, NHl);                      // (N, Cl)
  matmul_forward(partial, atty, p.attn_proj_weight, static_cast<const T*>(nullptr), N, Cl, C);
  const T* y = sum_rows(partial, scratch_->reduced.data(), N, C);  // (Nl, C)
  residual_bias_forward(x2, x, y, p.attn_proj_bias, Nl, C);

  // MLP: next = x2 + proj(gelu(fc(ln2(x2))))
  layernorm_forward(ln2, s.ln2_mean.data() + l * Nl, s.ln2_rstd.data() + l * Nl, x2, p.ln2_weight,
                    p.ln2_bias, Nl, C);
  const T* ln2_full =
      gather_rows(ln2, sequence_parallel_ ? s.ln2_full.data() + l * full : nullptr, N, C);
  matmul_forward(fch, ln2_full, p.fc_weight, p.fc_bias, N, C, Hl);  // (N, Hl)
  gelu_forward(fch_gelu, fch, static_cast<long>(N) * Hl);
  matmul_forward(partial, fch_gelu, p.mlp_proj_weight, static_cast<const T*>(nullptr), N, Hl, C);
  const T* z = sum_rows(partial, scratch_->reduced.data(), N, C);
  residual_bias_forward(s.residual.data() + (l + 1) * stride, x2, z, p.mlp_proj_bias, Nl, C);
}

template <class T>
T Gpt<T>::head_forward(Slot& s, const T* params) {
  const int C = shape_.d_model, V = shape_.vocab_size, N = s.batch * s.time;
  const int Nl = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  const T* x = s.residual.data() + static_cast<long>(partition_.layers()) * Nl * C;
  layernorm_forward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x,
                    view(params, layout_, "lnf.weight"), view(params, layout_, "lnf.bias"), Nl, C);
  const T* lnf_full = gather_rows(s.lnf.data(), s.lnf_full.data(), N, C);
  matmul_forward(s.logits.data(), lnf_full, params + wte.offset, static_cast<const T*>(nullptr), N,
                 C, Vl);  // (N, Vl), head tied to wte
  if (!s.has_targets) return T(0);

  // Cross-entropy from shard pieces: global row maxima, then global sums of exp and target logit.
  const int tp = partition_.tp_size;
  T* rows = scratch_->rows.data();
  T* row_max = scratch_->dlosses.data();  // free until backward
  crossentropy_shard_max(row_max, s.logits.data(), vocab_begin, V, N, Vl);
  if (tp > 1) {
    tp_->all_gather(row_max, rows, static_cast<std::size_t>(N));  // (tp, N)
    for (int n = 0; n < N; ++n)
      for (int r = 0; r < tp; ++r) row_max[n] = std::max(row_max[n], rows[r * N + n]);
  }
  T* sums = rows;  // (2, N): sum of exp, target logit
  crossentropy_shard_sums(sums, sums + N, s.logits.data(), s.targets.data(), row_max, vocab_begin,
                          V, N, Vl);
  tp_->all_reduce_sum(sums, 2 * static_cast<std::size_t>(N));
  crossentropy_shard_finish(s.losses.data(), s.logits.data(), s.logits.data(), row_max, sums,
                            sums + N, vocab_begin, V, N, Vl);
  T sum = 0;
  for (int i = 0; i < N; ++i) sum += s.losses[i];
  return sum / static_cast<T>(N);
}

template <class T>
void Gpt<T>::backward(int slot, const T* params, T* grads, const T* output_grad, T loss_scale) {
  STRATA_CHECK(slot >= 0 && slot < slots() && slots_[slot]->forwarded, "backward of slot ", slot,
               " without its forward");
  Slot& s = *slots_[slot];
  const int C = shape_.d_model, Nl = activation_rows(s.batch, s.time);
  if (partition_.has_head) {
    STRATA_CHECK(s.has_targets, "backward needs a forward with targets");
    head_backward(s, params, grads, loss_scale);
  } else {
    STRATA_CHECK(output_grad != nullptr, "a stage before the last needs its output gradient");
    std::copy_n(output_grad, static_cast<long>(Nl) * C, scratch_->dresidual.data());
  }
  for (int l = partition_.layers() - 1; l >= 0; --l) block_backward(s, params, grads, l);
  if (partition_.has_embedding)
    embed_backward(s, grads);
  else
    std::copy_n(scratch_->dresidual.data(), static_cast<long>(Nl) * C, s.input_grad.data());
  s.forwarded = false;  // the probabilities were overwritten by their gradient
}

template <class T>
void Gpt<T>::head_backward(Slot& s, const T* params, T* grads, T loss_scale) {
  const int C = shape_.d_model, V = shape_.vocab_size, N = s.batch * s.time;
  const int Nl = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const int vocab_begin = static_cast<int>(wte.slice.mid_begin);
  const int Vl = static_cast<int>(wte.slice.mid_count);
  Scratch& x = *scratch_;
  std::fill(x.dlosses.begin(), x.dlosses.begin() + N, loss_scale / static_cast<T>(N));
  // dlogits overwrite the probabilities in place.
  crossentropy_shard_backward(s.logits.data(), s.logits.data(), s.targets.data(), x.dlosses.data(),
                              vocab_begin, V, N, Vl);
  const T* lnf_full = sequence_parallel_ ? s.lnf_full.data() : s.lnf.data();
  matmul_backward(x.dfull.data(), grads + wte.offset, static_cast<T*>(nullptr), s.logits.data(),
                  lnf_full, params + wte.offset, N, C, Vl);
  const T* dlnf = sum_rows(x.dfull.data(), x.dlocal.data(), N, C);  // (Nl, C)
  std::fill(x.dresidual.begin(), x.dresidual.begin() + static_cast<long>(Nl) * C, T(0));
  layernorm_backward(
      x.dresidual.data(), view(grads, layout_, "lnf.weight"), view(grads, layout_, "lnf.bias"),
      dlnf, s.residual.data() + static_cast<long>(partition_.layers()) * Nl * C,
      view(params, layout_, "lnf.weight"), s.lnf_mean.data(), s.lnf_rstd.data(), Nl, C);
}

template <class T>
void Gpt<T>::block_backward(Slot& s, const T* params, T* grads, int l) {
  const int B = s.batch, T_ = s.time, C = shape_.d_model, tp = partition_.tp_size;
  const int Cl = C / tp, Hl = 4 * C / tp, NHl = shape_.n_head / tp;
  const int N = B * T_, Nl = activation_rows(B, T_);
  const long stride = static_cast<long>(Nl) * C, full = static_cast<long>(N) * C;
  const int layer = partition_.layer_begin + l;
  const Block p = block_params(params, layer);
  const std::string h = "h." + std::to_string(layer) + ".";
  auto g = [&](const char* name) { return view(grads, layout_, h + name); };
  const T* x = s.residual.data() + l * stride;
  const T* x2 = s.residual2.data() + l * stride;
  const T* ln1_full = sequence_parallel_ ? s.ln1_full.data() + l * full : s.ln1.data() + l * stride;
  const T* ln2_full = sequence_parallel_ ? s.ln2_full.data() + l * full : s.ln2.data() + l * stride;
  const T* qkv = s.qkv.data() + l * 3 * static_cast<long>(N) * Cl;
  const T* atty = s.atty.data() + l * static_cast<long>(N) * Cl;
  const T* att = s.att.data() + static_cast<long>(l) * B * NHl * T_ * T_;
  const T* fch = s.fch.data() + l * static_cast<long>(N) * Hl;
  const T* fch_gelu = s.fch_gelu.data() + l * static_cast<long>(N) * Hl;
  Scratch& x_ = *scratch_;
  T* dres = x_.dresidual.data();  // running d(loss)/d(residual stream), (Nl, C)
  T* dfch_gelu = x_.partial.data();

  // MLP: next = x2 + proj(gelu(fc(ln2(x2)))) + bias
  bias_backward(g("mlp.proj.bias"), dres, Nl, C);
  const T* dz = gather_rows(dres, x_.dfull.data(), N, C);  // (N, C)
  matmul_backward(dfch_gelu, g("mlp.proj.weight"), static_cast<T*>(nullptr), dz, fch_gelu,
                  p.mlp_proj_weight, N, Hl, C);
  gelu_backward(x_.dfch.data(), fch, dfch_gelu, static_cast<long>(N) * Hl);
  matmul_backward(x_.dfull.data(), g("mlp.fc.weight"), g("mlp.fc.bias"), x_.dfch.data(), ln2_full,
                  p.fc_weight, N, C, Hl);
  const T* dln2 = sum_rows(x_.dfull.data(), x_.dlocal.data(), N, C);  // (Nl, C)
  layernorm_backward(dres, g("ln2.weight"), g("ln2.bias"), dln2, x2, p.ln2_weight,
                     s.ln2_mean.data() + l * Nl, s.ln2_rstd.data() + l * Nl, Nl, C);

  // Attention: x2 = x + proj(attn(qkv(ln1(x)))) + bias
  bias_backward(g("attn.proj.bias"), dres, Nl, C);
  const T* dy = gather_rows(dres, x_.dfull.data(), N, C);
  matmul_backward(x_.datty.data(), g("attn.proj.weight"), static_cast<T*>(nullptr), dy, atty,
                  p.attn_proj_weight, N, Cl, C);
  attention_backward(x_.dqkv.data(), x_.datty.data(), qkv, att, B, T_, Cl, NHl);
  matmul_backward(x_.dfull.data(), g("attn.qkv.weight"), g("attn.qkv.bias"), x_.dqkv.data(),
                  ln1_full, p.qkv_weight, N, C, 3 * Cl);
  const T* dln1 = sum_rows(x_.dfull.data(), x_.dlocal.data(), N, C);
  layernorm_backward(dres, g("ln1.weight"), g("ln1.bias"), dln1, x, p.ln1_weight,
                     s.ln1_mean.data() + l * Nl, s.ln1_rstd.data() + l * Nl, Nl, C);
}

template <class T>
void Gpt<T>::embed_backward(Slot& s, T* grads) {
  const int C = shape_.d_model, N = s.batch * s.time, Nl = activation_rows(s.batch, s.time);
  const TensorView& wte = layout_.at("wte");
  const long row_begin = sequence_parallel_ ? static_cast<long>(partition_.tp_rank) * Nl : 0;
  const T* dres = scratch_->dresidual.data();
  position_embedding_backward(view(grads, layout_, "wpe"), dres, row_begin, Nl, s.time, C);
  const T* dfull = gather_rows(dres, scratch_->dfull.data(), N, C);
  embedding_shard_backward(grads + wte.offset, dfull, s.tokens.data(),
                           static_cast<int>(wte.slice.mid_begin),
                           static_cast<int>(wte.slice.mid_count), N, C);
}

template <class T>
const T* Gpt<T>::output(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_head);
  const Slot& s = *slots_[slot];
  return s.residual.data() +
         static_cast<long>(partition_.layers()) * activation_rows(s.batch, s.time) * shape_.d_model;
}

template <class T>
const T* Gpt<T>::input_grad(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && !partition_.has_embedding);
  return slots_[slot]->input_grad.data();
}

template <class T>
const T* Gpt<T>::losses(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && partition_.has_head);
  return slots_[slot]->losses.data();
}

template <class T>
std::size_t Gpt<T>::activation_bytes() const {
  std::size_t elements = 0;
  for (const auto& s : slots_) {
    for (const std::vector<T>* v :
         {&s->residual, &s->residual2, &s->ln1,      &s->ln2,       &s->ln1_full, &s->ln2_full,
          &s->ln1_mean, &s->ln1_rstd,  &s->ln2_mean, &s->ln2_rstd,  &s->qkv,      &s->atty,
          &s->att,      &s->fch,       &s->fch_gelu, &s->lnf,       &s->lnf_full, &s->lnf_mean,
          &s->lnf_rstd, &s->logits,    &s->losses,   &s->input_grad})
      elements += v->size();
  }
  return elements * sizeof(T);
}

template <class T>
const T* Gpt<T>::logits(int slot) const {
  STRATA_CHECK(slot >= 0 && slot < slots() && partition_.has_head);
  return slots_[slot]->logits.data();
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace strata
