// CudaOps<T> (cuda_ops.h): each op is the kernel launches CudaGpt queued inline for its step before
// the ops existed, with the same arguments in the same order.
#include "model/ops/cuda_ops.h"

#include "model/core/error.h"
#include "model/kernels/cuda/accumulate.h"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/attention_merge.h"
#include "model/kernels/cuda/crossentropy.h"
#include "model/kernels/cuda/embedding.h"
#include "model/kernels/cuda/gelu.h"
#include "model/kernels/cuda/layernorm.h"
#include "model/kernels/cuda/matmul.h"
#include "model/kernels/cuda/residual.h"
#include "model/kernels/cuda/rmsnorm.h"
#include "model/kernels/cuda/rope.h"
#include "model/kernels/cuda/swiglu.h"

namespace strata::cuda {

template <class T>
auto CudaOps<T>::sum_rows(Value* partial, Value* local_out, int N, int C) -> const Value* {
  if (!tp_) return partial;
  if (!sequence_parallel_) {
    tp_->all_reduce_sum(partial, static_cast<std::size_t>(N) * C, ctx_.stream());
    return partial;
  }
  tp_->reduce_scatter_sum(partial, local_out, static_cast<std::size_t>(N / tp_->size()) * C,
                          ctx_.stream());
  return local_out;
}

template <class T>
auto CudaOps<T>::gather_rows(const Value* local, Value* full, int N, int C) -> const Value* {
  if (!sequence_parallel_) return local;
  tp_->all_gather(local, full, static_cast<std::size_t>(N / tp_->size()) * C, ctx_.stream());
  return full;
}

template <class T>
void CudaOps<T>::gather_rows_into(const Value* local, Value* full, int N, int C) {
  if (gather_rows(local, full, N, C) == local) copy(full, local, static_cast<std::size_t>(N) * C);
}

template <class T>
void CudaOps<T>::matmul_forward(Value* out, Value* pre_gelu, const Value* inp, const Value* weight,
                                const Value* bias, int N, int IC, int OC, Epilogue epilogue,
                                const Fp8Gemm& fp8) {
  if (fp8) {
    fp8_forward(out, epilogue == Epilogue::bias ? nullptr : pre_gelu, inp, weight, bias, N, IC, OC,
                fp8);
    return;
  }
  switch (epilogue) {
    case Epilogue::bias:
      cuda::matmul_forward(ctx_, out, static_cast<T*>(nullptr), inp, weight, bias, N, IC, OC);
      return;
    case Epilogue::gelu:
    case Epilogue::bias_gelu:
      STRATA_CHECK(pre_gelu != nullptr, "a GELU epilogue keeps its input");
      cuda::matmul_forward(ctx_, out, pre_gelu, inp, weight, bias, N, IC, OC);
      return;
  }
  STRATA_CHECK(false, "unknown matmul epilogue");
}

template <class T>
void CudaOps<T>::matmul_backward_input(Value* dinp, const Value* dout, const Value* weight,
                                       const Value* pre_gelu, int N, int IC, int OC,
                                       const Fp8Gemm& fp8) {
  if (fp8) {
    fp8_backward_input(dinp, dout, weight, pre_gelu, N, IC, OC, fp8);
    return;
  }
  cuda::matmul_backward_input(ctx_, dinp, dout, weight, pre_gelu, N, IC, OC);
}

template <class T>
void CudaOps<T>::matmul_backward_weight(Grad* dweight, Grad* dbias, const Value* dout,
                                        const Value* inp, int N, int IC, int OC,
                                        const Fp8Gemm& fp8) {
  if (fp8) {
    matmul_backward_weight_rows(dweight, dbias, dout, inp, N, IC, OC, RowRange{0, N}, fp8);
    return;
  }
  cuda::matmul_backward_weight(ctx_, dweight, dbias, dout, inp, N, IC, OC, scratch_);
}

template <class T>
void CudaOps<T>::matmul_backward_weight_rows(Grad* dweight, Grad* dbias, const Value* dout,
                                             const Value* inp, int N, int IC, int OC,
                                             RowRange bias_rows, const Fp8Gemm& fp8) {
  if (bias_rows.count == N && !fp8) {  // every row: the bias gradient from the GEMM's epilogue
    matmul_backward_weight(dweight, dbias, dout, inp, N, IC, OC, fp8);
    return;
  }
  if (dbias != nullptr)
    bias_backward(dbias, dout + static_cast<std::size_t>(bias_rows.begin) * OC, bias_rows.count, OC,
                  scratch_, ctx_.stream());
  if (fp8)
    fp8_backward_weight(dweight, dout, inp, N, IC, OC, fp8);
  else
    matmul_backward_weight(dweight, nullptr, dout, inp, N, IC, OC, fp8);
}

template <class T>
void CudaOps<T>::gelu_forward(Value* out, const Value* inp, long n) {
  cuda::gelu_forward(out, inp, n, ctx_.stream());
}

template <class T>
void CudaOps<T>::gelu_backward(Value* dinp, const Value* inp, const Value* dout, long n) {
  cuda::gelu_backward(dinp, inp, dout, n, ctx_.stream());
}

template <class T>
void CudaOps<T>::layernorm_forward(Value* out, Stat* mean, Stat* rstd, const Value* inp,
                                   const Value* weight, const Value* bias, int N, int C, double eps,
                                   const Fp8Gemm& cast_for) {
  cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, ctx_.stream(),
                          fused_cast(out, static_cast<long>(N) * C, cast_for));
}

template <class T>
void CudaOps<T>::residual_layernorm_forward(Value* sum_out, Value* out, Stat* mean, Stat* rstd,
                                            const Value* residual, const Value* y,
                                            const Value* y_bias, const Value* weight,
                                            const Value* bias, int N, int C, double eps,
                                            const Fp8Gemm& cast_for) {
  cuda::residual_layernorm_forward(sum_out, out, mean, rstd, residual, y, y_bias, weight, bias, N,
                                   C, eps, ctx_.stream(),
                                   fused_cast(out, static_cast<long>(N) * C, cast_for));
}

template <class T>
void CudaOps<T>::layernorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                          const Value* weight, const Stat* mean, const Stat* rstd,
                                          int N, int C) {
  cuda::layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, N, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::layernorm_backward_weight(Grad* dweight, Grad* dbias, const Value* dout,
                                           const Value* inp, const Stat* mean, const Stat* rstd,
                                           int N, int C) {
  cuda::layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, C, scratch_,
                                  ctx_.stream());
}

template <class T>
void CudaOps<T>::residual_bias_forward(Value* out, const Value* x, const Value* y,
                                       const Value* bias, int N, int C) {
  cuda::residual_bias_forward(out, x, y, bias, N, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::attention_forward(Value* out, Stat* lse, const Value* qkv, int B, int T_, int C,
                                   int NH, int KV) {
  cuda::attention_forward(out, lse, qkv, B, T_, C, NH, KV, ctx_.stream());
}

template <class T>
void CudaOps<T>::attention_backward(Value* dqkv, const Value* dout, const Value* qkv,
                                    const Value* out, const Stat* lse, int B, int T_, int C, int NH,
                                    int KV) {
  cuda::attention_backward(dqkv, dout, qkv, out, lse, B, T_, C, NH, KV, scratch_, ctx_.stream());
}

template <class T>
void CudaOps<T>::attention_pair_forward(Value* out, Stat* lse, const Value* q, const Value* k,
                                        const Value* v, const AttentionPair& pair) {
  cuda::attention_pair_forward(out, lse, q, k, v, pair, ctx_.stream());
}

template <class T>
void CudaOps<T>::attention_merge(Value* out, Stat* lse, const Value* part, const Stat* part_lse,
                                 const AttentionPair& pair) {
  const cuda::AttentionMergeShape shape{pair.B,         pair.Tq,        pair.NH,
                                        pair.hs,        pair.out_row,   pair.out_batch,
                                        pair.stat_head, pair.stat_batch};
  cuda::attention_merge(out, lse, part, part_lse, shape, ctx_.stream());
}

template <class T>
void CudaOps<T>::attention_delta(Stat* delta, const Value* dout, const Value* out,
                                 const AttentionPair& pair) {
  cuda::attention_pair_delta(delta, dout, out, pair, ctx_.stream());
}

template <class T>
void CudaOps<T>::attention_pair_backward(Value* dq, Value* dk, Value* dv, const Value* dout,
                                         const Stat* lse, const Stat* delta, const Value* q,
                                         const Value* k, const Value* v,
                                         const AttentionPair& pair) {
  cuda::attention_pair_backward(dq, dk, dv, dout, lse, delta, q, k, v, pair, ctx_.stream());
}

template <class T>
void CudaOps<T>::copy_columns(Value* dst, long dst_row, const Value* src, long src_row, long rows,
                              int cols) {
  if (rows == 0 || cols == 0) return;
  STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_row * sizeof(T), src, src_row * sizeof(T),
                                      cols * sizeof(T), static_cast<std::size_t>(rows),
                                      cudaMemcpyDeviceToDevice, ctx_.stream()));
}

template <class T>
void CudaOps<T>::attention_forward_rows(Value*, const Value*, int, int, int, int, int) {
  fail("KV-cache decoding has no CUDA kernel: generation decodes on the CPU (model/gpt_decoder.h)");
}

template <class T>
void CudaOps<T>::embedding_forward(Value* out, const Ids* tokens, const Value* wte_shard,
                                   VocabShard vocab, int N, int C) {
  embedding_shard_forward(out, tokens, wte_shard, vocab.begin, vocab.rows, N, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::embedding_backward(Grad* dwte_shard, const Value* dout, const Ids* tokens,
                                    VocabShard vocab, int N, int C) {
  embedding_shard_backward(dwte_shard, dout, tokens, vocab.begin, vocab.rows, N, C, scratch_,
                           ctx_.stream());
}

template <class T>
void CudaOps<T>::position_embedding_forward(Value* x, const Value* wpe, long row_begin, int rows,
                                            int T_, int C) {
  cuda::position_embedding_forward(x, wpe, row_begin, rows, T_, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::position_embedding_backward(Grad* dwpe, const Value* dx, long row_begin, int rows,
                                             int T_, int C) {
  cuda::position_embedding_backward(dwpe, dx, row_begin, rows, T_, C, ctx_.stream());
}

template <class T>
float* CudaOps<T>::loss_gradient(Scalar loss_scale, int N) {
  float* dlosses = scratch_.allocate<float>(static_cast<std::size_t>(N));
  fill(dlosses, loss_scale / static_cast<float>(N), N, ctx_.stream());
  return dlosses;
}

template <class T>
void CudaOps<T>::cross_entropy_shard_statistics(Stat* stats, const Value* logits,
                                                const Ids* targets, VocabShard vocab, int N) {
  cudaStream_t stream = ctx_.stream();
  float *row_max = stats, *sum_exp = stats + N, *target_logit = stats + 2 * N;
  crossentropy_shard_max(row_max, logits, vocab.begin, vocab.vocab_size, N, vocab.rows, stream);
  tp_->all_reduce_max(row_max, static_cast<std::size_t>(N), stream);
  crossentropy_shard_sums(sum_exp, target_logit, logits, targets, row_max, vocab.begin,
                          vocab.vocab_size, N, vocab.rows, stream);
  tp_->all_reduce_sum(sum_exp, 2 * static_cast<std::size_t>(N), stream);  // and target_logit
}

template <class T>
void CudaOps<T>::cross_entropy_forward(Stat* losses, Stat* stats, Value* logits, const Ids* targets,
                                       VocabShard vocab, int N) {
  cudaStream_t stream = ctx_.stream();
  if (!tp_) {  // one shard: online softmax in one pass over each row
    softmax_crossentropy_stats(losses, stats, stats + N, stats + 2 * N, logits, targets, N,
                               vocab.vocab_size, vocab.rows, stream);
    return;
  }
  cross_entropy_shard_statistics(stats, logits, targets, vocab, N);
  crossentropy_losses(losses, stats, stats + N, stats + 2 * N, N, stream);
}

template <class T>
void CudaOps<T>::cross_entropy_backward(Stat* losses, const Stat* stats, Value* logits,
                                        const Ids* targets, Scalar loss_scale, VocabShard vocab,
                                        int N) {
  ArenaScope scope(scratch_);
  const float* dlosses = loss_gradient(loss_scale, N);
  // Rewrites the forward's losses with the same values (the same formula on the same inputs).
  crossentropy_shard_finish_backward(losses, logits, logits, targets, dlosses, stats, stats + N,
                                     stats + 2 * N, vocab.begin, vocab.vocab_size, N, vocab.rows,
                                     ctx_.stream());
}

template <class T>
void CudaOps<T>::cross_entropy_forward_backward(Stat* losses, Stat* stats, Value* logits,
                                                const Ids* targets, Scalar loss_scale,
                                                VocabShard vocab, int N) {
  ArenaScope scope(scratch_);
  const float* dlosses = loss_gradient(loss_scale, N);
  if (!tp_) {  // one shard: forward and backward in one launch
    softmax_crossentropy_forward_backward(losses, logits, logits, targets, dlosses, N,
                                          vocab.vocab_size, vocab.rows, ctx_.stream());
    return;
  }
  cross_entropy_shard_statistics(stats, logits, targets, vocab, N);
  crossentropy_shard_finish_backward(losses, logits, logits, targets, dlosses, stats, stats + N,
                                     stats + 2 * N, vocab.begin, vocab.vocab_size, N, vocab.rows,
                                     ctx_.stream());
}

STRATA_CHECK_GPT_OPS(CudaOps<float>);
STRATA_CHECK_GPT_OPS(CudaOps<__nv_bfloat16>);
STRATA_CHECK_GPT_OPS(CudaOps<__half>);

template <class T>
void CudaOps<T>::rmsnorm_forward(Value* out, Stat* rstd, const Value* inp, const Value* weight,
                                 int N, int C, double eps, const Fp8Gemm& cast_for) {
  cuda::rmsnorm_forward(out, rstd, inp, weight, N, C, eps, ctx_.stream(),
                        fused_cast(out, static_cast<long>(N) * C, cast_for));
}

template <class T>
void CudaOps<T>::residual_rmsnorm_forward(Value* sum_out, Value* out, Stat* rstd,
                                          const Value* residual, const Value* y,
                                          const Value* y_bias, const Value* weight, int N, int C,
                                          double eps, const Fp8Gemm& cast_for) {
  cuda::residual_rmsnorm_forward(sum_out, out, rstd, residual, y, y_bias, weight, N, C, eps,
                                 ctx_.stream(),
                                 fused_cast(out, static_cast<long>(N) * C, cast_for));
}

template <class T>
void CudaOps<T>::rmsnorm_backward_input(Value* dinp, const Value* dout, const Value* inp,
                                        const Value* weight, const Stat* rstd, int N, int C) {
  cuda::rmsnorm_backward_input(dinp, dout, inp, weight, rstd, N, C, ctx_.stream());
}

template <class T>
void CudaOps<T>::rmsnorm_backward_weight(Grad* dweight, const Value* dout, const Value* inp,
                                         const Stat* rstd, int N, int C) {
  cuda::rmsnorm_backward_weight(dweight, dout, inp, rstd, N, C, scratch_, ctx_.stream());
}

template <class T>
void CudaOps<T>::swiglu_forward(Value* out, const Value* h, int N, int F) {
  cuda::swiglu_forward(out, h, N, F, ctx_.stream());
}

template <class T>
void CudaOps<T>::swiglu_backward(Value* dh, const Value* dout, const Value* h, int N, int F) {
  cuda::swiglu_backward(dh, dout, h, N, F, ctx_.stream());
}

template <class T>
void CudaOps<T>::rope_forward(Value* qkv, const RopeLayout& layout) {
  cuda::rope_forward(qkv, layout, ctx_.stream());
}

template <class T>
void CudaOps<T>::rope_backward(Value* dqkv, const RopeLayout& layout) {
  cuda::rope_backward(dqkv, layout, ctx_.stream());
}

template class CudaOps<float>;
template class CudaOps<__nv_bfloat16>;
template class CudaOps<__half>;

}  // namespace strata::cuda
