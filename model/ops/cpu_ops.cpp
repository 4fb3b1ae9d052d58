// CpuOps<T> (cpu_ops.h): each op is its kernel calls followed by the rounding of what they wrote,
// exactly the sequence the GPT block ran inline before the ops existed.
#include "model/ops/cpu_ops.h"

#include <algorithm>

#include "model/core/error.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/residual.h"
#include "model/kernels/cpu/rmsnorm.h"
#include "model/kernels/cpu/rope.h"
#include "model/kernels/cpu/swiglu.h"
#include "model/kernels/cpu/vocab_parallel.h"

namespace strata {

STRATA_CHECK_GPT_OPS(CpuOps<float>);
STRATA_CHECK_GPT_OPS(CpuOps<double>);

template <class T>
CpuOps<T>::CpuOps(cpu::ComputeDtype compute, Collectives* tp, bool sequence_parallel,
                  Collectives* cp)
    : compute_(compute),
      alone_(tp == nullptr ? std::make_unique<SingleRank>() : nullptr),
      tp_(tp == nullptr ? alone_.get() : tp),
      sequence_parallel_(sequence_parallel && tp_->size() > 1),
      cp_(cp) {}

template <class T>
auto CpuOps<T>::sum_rows(Value* partial, Value* local_out, int N, int C) -> const Value* {
  if (!sequence_parallel_) {
    tp_->all_reduce_sum(partial, static_cast<std::size_t>(N) * C);  // no-op for one rank
    return partial;
  }
  tp_->reduce_scatter_sum(partial, local_out, static_cast<std::size_t>(N / tp_->size()) * C);
  return local_out;
}

template <class T>
auto CpuOps<T>::gather_rows(const Value* local, Value* full, int N, int C) -> const Value* {
  if (!sequence_parallel_) return local;
  tp_->all_gather(local, full, static_cast<std::size_t>(N / tp_->size()) * C);
  return full;
}

template <class T>
void CpuOps<T>::gather_rows_into(const Value* local, Value* full, int N, int C) {
  if (gather_rows(local, full, N, C) == local) std::copy_n(local, static_cast<long>(N) * C, full);
}

template <class T>
void CpuOps<T>::round_to_compute(Value* data, long n) const {
  if (compute_ != cpu::ComputeDtype::fp32) cpu::round_to_dtype(data, n, compute_);
}

template <class T>
void CpuOps<T>::matmul_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                               const Value* bias, int N, int IC, int OC, Epilogue epilogue,
                               const Fp8Gemm& fp8) {
  const long n = static_cast<long>(N) * OC;
  if (fp8) {
    inp = fp8_cast(inp, N, IC, fp8, Fp8Operand::input, true, fp8_input_);
    weight = fp8_cast(weight, OC, IC, fp8, Fp8Operand::weight, true, fp8_weight_);
  }
  switch (epilogue) {
    case Epilogue::bias:
      cpu::matmul_forward(out, inp, weight, bias, N, IC, OC);
      round_to_compute(out, n);
      return;
    case Epilogue::gelu:  // the bias inside the product
      cpu::matmul_forward(pre_gelu, inp, weight, bias, N, IC, OC);
      round_to_compute(pre_gelu, n);
      cpu::gelu_forward(out, pre_gelu, n);
      round_to_compute(out, n);
      return;
    case Epilogue::bias_gelu:  // the bias added after the product, with the GELU (both rounded)
      cpu::matmul_forward(pre_gelu, inp, weight, static_cast<const T*>(nullptr), N, IC, OC);
      cpu::bias_gelu_forward(out, pre_gelu, bias, N, OC, compute_);
      return;
  }
  STRATA_CHECK(false, "unknown matmul epilogue");
}

template <class T>
void CpuOps<T>::matmul_backward_input(Value* dinp, const Value* dout, const Value* weight,
                                      const Value* pre_gelu, int N, int IC, int OC,
                                      const Fp8Gemm& fp8) {
  const long n = static_cast<long>(N) * IC;
  if (fp8) {  // the sum runs over OC: dout's columns, the weight's rows
    dout = fp8_cast(dout, N, OC, fp8, Fp8Operand::grad_output, true, fp8_grad_);
    weight = fp8_cast(weight, OC, IC, fp8, Fp8Operand::weight, false, fp8_weight_);
  }
  if (pre_gelu == nullptr) {
    cpu::matmul_backward_input(dinp, dout, weight, N, IC, OC);
    round_to_compute(dinp, n);
    return;
  }
  if (gelu_grad_.size() < static_cast<std::size_t>(n)) gelu_grad_.resize(n);
  cpu::matmul_backward_input(gelu_grad_.data(), dout, weight, N, IC, OC);
  round_to_compute(gelu_grad_.data(), n);
  gelu_backward(dinp, pre_gelu, gelu_grad_.data(), n);
}

template <class T>
void CpuOps<T>::matmul_backward_weight(Grad* dweight, Grad* dbias, const Value* dout,
                                       const Value* inp, int N, int IC, int OC,
                                       const Fp8Gemm& fp8) {
  if (!fp8) {
    cpu::matmul_backward_weight(dweight, dbias, dout, inp, N, IC, OC);
    return;
  }
  matmul_backward_weight_rows(dweight, dbias, dout, inp, N, IC, OC, RowRange{0, N}, fp8);
}

template <class T>
void CpuOps<T>::matmul_backward_weight_rows(Grad* dweight, Grad* dbias, const Value* dout,
                                            const Value* inp, int N, int IC, int OC,
                                            RowRange bias_rows, const Fp8Gemm& fp8) {
  if (dbias != nullptr)
    cpu::bias_backward(dbias, dout + static_cast<long>(bias_rows.begin) * OC, bias_rows.count, OC);
  if (fp8) {  // the sum runs over the N rows of both
    dout = fp8_cast(dout, N, OC, fp8, Fp8Operand::grad_output, false, fp8_grad_);
    inp = fp8_cast(inp, N, IC, fp8, Fp8Operand::input, false, fp8_input_);
  }
  cpu::matmul_backward_weight(dweight, static_cast<T*>(nullptr), dout, inp, N, IC, OC);
}

template <class T>
void CpuOps<T>::gelu_forward(Value* out, const Value* inp, long n) {
  cpu::gelu_forward(out, inp, n);
  round_to_compute(out, n);
}

template <class T>
void CpuOps<T>::gelu_backward(Value* dinp, const Value* inp, const Value* dout, long n) {
  cpu::gelu_backward(dinp, inp, dout, n);
  round_to_compute(dinp, n);
}

template <class T>
void CpuOps<T>::layernorm_forward(Value* out, Stat* mean, Stat* rstd, const Value* inp,
                                  const Value* weight, const Value* bias, int N, int C, double eps,
                                  const Fp8Gemm&) {
  cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  round_to_compute(out, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::residual_layernorm_forward(Value* sum_out, Value* out, Stat* mean, Stat* rstd,
                                           const Value* residual, const Value* y,
                                           const Value* y_bias, const Value* weight,
                                           const Value* bias, int N, int C, double eps,
                                           const Fp8Gemm&) {
  cpu::residual_layernorm_forward(sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N, C,
                                  eps, compute_);
}

template <class T>
void CpuOps<T>::layernorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                         const Value* weight, const Stat* mean, const Stat* rstd,
                                         int N, int C) {
  cpu::layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C);
  round_to_compute(dinp, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::layernorm_backward_weight(Grad* dweight, Grad* dbias, const Value* dout,
                                          const Value* inp, const Stat* mean, const Stat* rstd,
                                          int N, int C) {
  cpu::layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, C);
}

template <class T>
void CpuOps<T>::residual_bias_forward(Value* out, const Value* x, const Value* y, const Value* bias,
                                      int N, int C) {
  cpu::residual_bias_forward(out, x, y, bias, N, C);
  round_to_compute(out, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::attention_forward(Value* out, Stat* lse, const Value* qkv, int B, int T_, int C,
                                  int NH, int KV) {
  cpu::attention_forward(out, lse, qkv, B, T_, C, NH, KV, attention_);
  round_to_compute(out, static_cast<long>(B) * T_ * C);
}

template <class T>
void CpuOps<T>::attention_backward(Value* dqkv, const Value* dout, const Value* qkv,
                                   const Value* out, const Stat* lse, int B, int T_, int C, int NH,
                                   int KV) {
  cpu::attention_backward(dqkv, dout, qkv, out, lse, B, T_, C, NH, KV, compute_, attention_);
  round_to_compute(dqkv, static_cast<long>(B) * T_ * (C + 2L * KV * (C / NH)));
}

namespace {

// The pair's operands as the kernel's strided views.
cpu::AttentionChunk chunk_of(const AttentionPair& p) {
  return {p.B, p.Tq, p.Tk, p.NH, p.KV, p.hs, p.causal_offset};
}
template <class V>
cpu::AttentionRows<V> rows(V* data, long row_stride, long batch_stride) {
  return {data, row_stride, batch_stride};
}
template <class S>
cpu::AttentionStats<S> stats(S* data, const AttentionPair& p) {
  return {data, p.stat_head, p.stat_batch};
}

}  // namespace

template <class T>
void CpuOps<T>::attention_pair_forward(Value* out, Stat* lse, const Value* q, const Value* k,
                                       const Value* v, const AttentionPair& pair) {
  cpu::attention_chunk_forward<T>(rows(out, pair.out_row, pair.out_batch), stats(lse, pair),
                                  rows(q, pair.q_row, pair.q_batch),
                                  rows(k, pair.kv_row, pair.kv_batch),
                                  rows(v, pair.kv_row, pair.kv_batch), chunk_of(pair), attention_);
}

template <class T>
void CpuOps<T>::attention_merge(Value* out, Stat* lse, const Value* part, const Stat* part_lse,
                                const AttentionPair& pair) {
  cpu::attention_merge<T>(rows(out, pair.out_row, pair.out_batch), stats(lse, pair),
                          rows(part, pair.out_row, pair.out_batch), stats(part_lse, pair),
                          chunk_of(pair));
}

template <class T>
void CpuOps<T>::attention_delta(Stat* delta, const Value* dout, const Value* out,
                                const AttentionPair& pair) {
  cpu::attention_delta<T>(stats(delta, pair), rows(dout, pair.out_row, pair.out_batch),
                          rows(out, pair.out_row, pair.out_batch), chunk_of(pair));
}

template <class T>
void CpuOps<T>::attention_pair_backward(Value* dq, Value* dk, Value* dv, const Value* dout,
                                        const Stat* lse, const Stat* delta, const Value* q,
                                        const Value* k, const Value* v, const AttentionPair& pair) {
  cpu::attention_chunk_backward<T>(
      rows(dq, pair.q_row, pair.q_batch), rows(dk, pair.kv_row, pair.kv_batch),
      rows(dv, pair.kv_row, pair.kv_batch), rows(dout, pair.out_row, pair.out_batch),
      stats(lse, pair), stats(delta, pair), rows(q, pair.q_row, pair.q_batch),
      rows(k, pair.kv_row, pair.kv_batch), rows(v, pair.kv_row, pair.kv_batch), chunk_of(pair),
      compute_, attention_);
}

template <class T>
void CpuOps<T>::copy_columns(Value* dst, long dst_row, const Value* src, long src_row, long rows,
                             int cols) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; ++r) std::copy_n(src + r * src_row, cols, dst + r * dst_row);
}

template <class T>
void CpuOps<T>::attention_forward_rows(Value* out, const Value* qkv, int t0, int T_, int C, int NH,
                                       int KV) {
  cpu::attention_forward_rows(out, qkv, t0, T_, C, NH, KV);
  round_to_compute(out, static_cast<long>(T_ - t0) * C);
}

template <class T>
void CpuOps<T>::embedding_forward(Value* out, const Ids* tokens, const Value* wte_shard,
                                  VocabShard vocab, int N, int C) {
  cpu::embedding_shard_forward(out, tokens, wte_shard, vocab.begin, vocab.rows, N, C);
}

template <class T>
void CpuOps<T>::embedding_backward(Grad* dwte_shard, const Value* dout, const Ids* tokens,
                                   VocabShard vocab, int N, int C) {
  cpu::embedding_shard_backward(dwte_shard, dout, tokens, vocab.begin, vocab.rows, N, C);
}

template <class T>
void CpuOps<T>::position_embedding_forward(Value* x, const Value* wpe, long row_begin, int rows,
                                           int T_, int C) {
  cpu::position_embedding_forward(x, wpe, row_begin, rows, T_, C);
  round_to_compute(x, static_cast<long>(rows) * C);
}

template <class T>
void CpuOps<T>::position_embedding_backward(Grad* dwpe, const Value* dx, long row_begin, int rows,
                                            int T_, int C) {
  cpu::position_embedding_backward(dwpe, dx, row_begin, rows, T_, C);
}

// Global row maxima (each shard's, then the largest over the group: gathered, there being no
// float maximum among the collectives), then global sums of exp and the target logits.
template <class T>
void CpuOps<T>::cross_entropy_forward(Stat* losses, Stat* stats, Value* logits, const Ids* targets,
                                      VocabShard vocab, int N) {
  STRATA_CHECK(stats == nullptr, "the CPU's cross-entropy keeps no row statistics");
  const int tp = tp_->size(), V = vocab.vocab_size, Vl = vocab.rows;
  rows_.resize(static_cast<std::size_t>(std::max(tp, 2)) * N);
  row_max_.resize(static_cast<std::size_t>(N));
  T* row_max = row_max_.data();
  cpu::crossentropy_shard_max(row_max, logits, vocab.begin, V, N, Vl);
  if (tp > 1) {
    tp_->all_gather(row_max, rows_.data(), static_cast<std::size_t>(N));  // (tp, N)
    for (int n = 0; n < N; ++n)
      for (int r = 0; r < tp; ++r) row_max[n] = std::max(row_max[n], rows_[r * N + n]);
  }
  T* sums = rows_.data();  // (2, N): sum of exp, target logit
  cpu::crossentropy_shard_sums(sums, sums + N, logits, targets, row_max, vocab.begin, V, N, Vl);
  tp_->all_reduce_sum(sums, 2 * static_cast<std::size_t>(N));
  cpu::crossentropy_shard_finish(losses, logits, logits, row_max, sums, sums + N, vocab.begin, V, N,
                                 Vl);
}

template <class T>
void CpuOps<T>::cross_entropy_backward(Stat* /*losses*/, const Stat* stats, Value* logits,
                                       const Ids* targets, Scalar loss_scale, VocabShard vocab,
                                       int N) {
  STRATA_CHECK(stats == nullptr, "the CPU's cross-entropy keeps no row statistics");
  row_max_.resize(static_cast<std::size_t>(N));
  T* dlosses = row_max_.data();  // the maxima are not needed any more
  std::fill_n(dlosses, N, loss_scale / static_cast<T>(N));
  // dlogits overwrite the probabilities in place.
  cpu::crossentropy_shard_backward(logits, logits, targets, dlosses, vocab.begin, vocab.vocab_size,
                                   N, vocab.rows);
  round_to_compute(logits, static_cast<long>(N) * vocab.rows);
}

template <class T>
void CpuOps<T>::cross_entropy_forward_backward(Stat* losses, Stat* stats, Value* logits,
                                               const Ids* targets, Scalar loss_scale,
                                               VocabShard vocab, int N) {
  cross_entropy_forward(losses, stats, logits, targets, vocab, N);
  cross_entropy_backward(losses, stats, logits, targets, loss_scale, vocab, N);
}

template <class T>
void CpuOps<T>::rmsnorm_forward(Value* out, Stat* rstd, const Value* inp, const Value* weight,
                                int N, int C, double eps, const Fp8Gemm&) {
  cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  round_to_compute(out, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::residual_rmsnorm_forward(Value* sum_out, Value* out, Stat* rstd,
                                         const Value* residual, const Value* y, const Value* y_bias,
                                         const Value* weight, int N, int C, double eps,
                                         const Fp8Gemm&) {
  cpu::residual_rmsnorm_forward(sum_out, out, rstd, residual, y, y_bias, weight, N, C, eps,
                                compute_);
}

template <class T>
void CpuOps<T>::rmsnorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                       const Value* weight, const Stat* rstd, int N, int C) {
  cpu::rmsnorm_backward_input(dinp, dout, inp, weight, rstd, N, C);
  round_to_compute(dinp, static_cast<long>(N) * C);
}

template <class T>
void CpuOps<T>::rmsnorm_backward_weight(Grad* dweight, const Value* dout, const Value* inp,
                                        const Stat* rstd, int N, int C) {
  cpu::rmsnorm_backward_weight(dweight, dout, inp, rstd, N, C);
}

template <class T>
void CpuOps<T>::swiglu_forward(Value* out, const Value* h, int N, int F) {
  cpu::swiglu_forward(out, h, N, F);
  round_to_compute(out, static_cast<long>(N) * F);
}

template <class T>
void CpuOps<T>::swiglu_backward(Value* dh, const Value* dout, const Value* h, int N, int F) {
  cpu::swiglu_backward(dh, dout, h, N, F);
  round_to_compute(dh, 2L * N * F);
}

template <class T>
void CpuOps<T>::rope_forward(Value* qkv, const RopeLayout& layout) {
  cpu::rope_forward(qkv, layout);
  round_to_compute(qkv, static_cast<long>(layout.B) * layout.T * layout.row_stride);
}

template <class T>
void CpuOps<T>::rope_backward(Value* dqkv, const RopeLayout& layout) {
  cpu::rope_backward(dqkv, layout);
  round_to_compute(dqkv, static_cast<long>(layout.B) * layout.T * layout.row_stride);
}

template class CpuOps<float>;
template class CpuOps<double>;

}  // namespace strata
