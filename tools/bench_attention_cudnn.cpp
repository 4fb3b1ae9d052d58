// The two operation graphs of tools/bench_attention_cudnn.h. They follow, node for node, the
// composite graphs cudnn_frontend builds for sdpa (is_inference = false, causal_mask, attn_scale)
// and sdpa_backward on cuDNN 9 (node/scaled_dot_product_flash_attention.h): cuDNN recognises
// the pattern as a whole and runs its fused flash kernel, so an unfamiliar variant (a missing
// multiply by one, a different index type) may find no engine at all. Hence the backward's two
// forms: the legacy one cudnn_frontend built for early cuDNN 9, and the current one
// (cudnn-frontend's CompositeSDPABackwardNode, without dropout, bias or GQA), tried when cuDNN
// rejects the first.
#include "tools/bench_attention_cudnn.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/kernels/cuda/check.h"

namespace strata::bench {

namespace {

// Uids of the tensors bound at execution; virtual ones start at 1000 (GraphBuilder).
enum Uid : std::int64_t {
  kQ = 1,
  kKTransposed,
  kV,
  kVTransposed,
  kOut,
  kStats,
  kScale,
  kMaskFill,
  kOne,
  kDOut,
  kDQ,
  kDK,
  kDV,
  kDQAccumulator,
  kSoftmaxSum,
};

// Dimensions and strides of every tensor in both graphs, from the attention shape.
struct Layouts {
  Layouts(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t NH)
      : heads{B, NH, T, C / NH},
        heads_transposed{B, NH, C / NH, T},
        rows{B, NH, T, 1},
        scores{B, NH, T, T},
        qkv_strides{T * 3 * C, C / NH, 3 * C, 1},
        qkv_transposed_strides{T * 3 * C, C / NH, 1, 3 * C},
        out_strides{T * C, C / NH, C, 1},
        packed_heads_strides{NH * T * (C / NH), T * (C / NH), C / NH, 1},
        rows_strides{NH * T, T, 1, 1},
        scores_strides{NH * T * T, T * T, T, 1},
        scores_transposed_strides{NH * T * T, T * T, 1, T} {}

  // q, k, v, out and their gradients (B, NH, T, hs); Kᵀ and Vᵀ (B, NH, hs, T); one value per
  // query row (B, NH, T, 1); scores and probabilities (B, NH, T, T).
  Dims4 heads, heads_transposed, rows, scores;
  // Head h of row t of q at qkv + t·3C + h·hs (k at + C, v at + 2C); the same memory read as Kᵀ.
  Dims4 qkv_strides, qkv_transposed_strides;
  // out and dout (B, T, C).
  Dims4 out_strides;
  // The dQ accumulator, a plain (B, NH, T, hs) block of cuDNN's own.
  Dims4 packed_heads_strides;
  // stats (B, NH, T): Strata's lse layout.
  Dims4 rows_strides;
  // Row-major (T, T) per head, and the same read as its transpose.
  Dims4 scores_strides, scores_transposed_strides;
};

cudnnDataType_t cudnn_type(AttentionIoType io) {
  return io == AttentionIoType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

// The scaled (by the graph's one `scale` scalar), causally masked scores (B, NH, T, T) in fp32:
// the part both passes share. Masked entries get the lowest float, not -inf, so that subtracting
// the row max never computes -inf - -inf.
cudnnBackendDescriptor_t masked_scores(GraphBuilder& graph, const Layouts& layout,
                                       cudnnBackendDescriptor_t q,
                                       cudnnBackendDescriptor_t k_transposed,
                                       cudnnBackendDescriptor_t scale) {
  const auto scores = [&](cudnnDataType_t type) {
    return graph.virtual_tensor(type, layout.scores, layout.scores_strides);
  };
  cudnnBackendDescriptor_t s = graph.matmul(q, k_transposed, scores(CUDNN_DATA_FLOAT));
  s = graph.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, scale, scores(CUDNN_DATA_FLOAT));
  // Query row i sees key column j when i >= j (axis 2 indexes rows, axis 3 columns).
  cudnnBackendDescriptor_t row = graph.index(2, s, scores(CUDNN_DATA_INT32));
  cudnnBackendDescriptor_t column = graph.index(3, s, scores(CUDNN_DATA_INT32));
  cudnnBackendDescriptor_t keep = graph.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row,
                                                  column, scores(CUDNN_DATA_BOOLEAN));
  return graph.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s,
                         graph.scalar(kMaskFill, CUDNN_DATA_FLOAT), keep, scores(CUDNN_DATA_FLOAT));
}

// out = softmax(masked scores) · v, and stats = max + log Σ exp(s - max) per row.
GraphBuilder forward_graph(const Layouts& layout, cudnnDataType_t io) {
  GraphBuilder graph;
  const auto row_values = [&] {
    return graph.virtual_tensor(CUDNN_DATA_FLOAT, layout.rows, layout.rows_strides);
  };
  const auto scores = [&](cudnnDataType_t type) {
    return graph.virtual_tensor(type, layout.scores, layout.scores_strides);
  };
  cudnnBackendDescriptor_t q = graph.tensor(kQ, io, layout.heads, layout.qkv_strides);
  cudnnBackendDescriptor_t k_transposed =
      graph.tensor(kKTransposed, io, layout.heads_transposed, layout.qkv_transposed_strides);
  cudnnBackendDescriptor_t v = graph.tensor(kV, io, layout.heads, layout.qkv_strides);
  cudnnBackendDescriptor_t out = graph.tensor(kOut, io, layout.heads, layout.out_strides);
  cudnnBackendDescriptor_t stats =
      graph.tensor(kStats, CUDNN_DATA_FLOAT, layout.rows, layout.rows_strides);

  cudnnBackendDescriptor_t s =
      masked_scores(graph, layout, q, k_transposed, graph.scalar(kScale, CUDNN_DATA_FLOAT));
  cudnnBackendDescriptor_t max = graph.reduction(CUDNN_REDUCE_TENSOR_MAX, s, row_values());
  cudnnBackendDescriptor_t shifted =
      graph.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, max, scores(CUDNN_DATA_FLOAT));
  cudnnBackendDescriptor_t exps =
      graph.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, shifted, scores(CUDNN_DATA_FLOAT));
  cudnnBackendDescriptor_t sum = graph.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, row_values());
  cudnnBackendDescriptor_t log_sum =
      graph.pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, row_values());
  graph.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, max, log_sum, stats);
  // The probabilities enter the second matmul in the io type, as cudnn_frontend declares them.
  cudnnBackendDescriptor_t probabilities =
      graph.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, exps, sum, scores(io));
  graph.matmul(probabilities, v, out);
  return graph;
}

// dV = Pᵀ·dO; dS = P ⊙ (dO·Vᵀ - rowsum(dO ⊙ O)) · scale; dK = dSᵀ·Q; dQ = dS·K, with P recomputed
// as exp(masked scores - stats), in `form` (see bench_attention_cudnn.h).
GraphBuilder backward_graph(const Layouts& layout, cudnnDataType_t io, CudnnBackwardForm form) {
  const bool legacy = form == CudnnBackwardForm::legacy;
  GraphBuilder graph;
  const auto row_values = [&] {
    return graph.virtual_tensor(CUDNN_DATA_FLOAT, layout.rows, layout.rows_strides);
  };
  const auto scores = [&](cudnnDataType_t type) {
    return graph.virtual_tensor(type, layout.scores, layout.scores_strides);
  };
  const auto scores_transposed = [&](cudnnDataType_t type) {
    return graph.virtual_tensor(type, layout.scores, layout.scores_transposed_strides);
  };
  const auto heads = [&](std::int64_t uid, const Dims4& strides) {
    return graph.tensor(uid, io, layout.heads, strides);
  };
  cudnnBackendDescriptor_t q = heads(kQ, layout.qkv_strides);
  cudnnBackendDescriptor_t k_transposed =
      graph.tensor(kKTransposed, io, layout.heads_transposed, layout.qkv_transposed_strides);
  cudnnBackendDescriptor_t v_transposed =
      graph.tensor(kVTransposed, io, layout.heads_transposed, layout.qkv_transposed_strides);
  cudnnBackendDescriptor_t out = heads(kOut, layout.out_strides);
  cudnnBackendDescriptor_t dout = heads(kDOut, layout.out_strides);
  cudnnBackendDescriptor_t stats =
      graph.tensor(kStats, CUDNN_DATA_FLOAT, layout.rows, layout.rows_strides);
  cudnnBackendDescriptor_t dq = heads(kDQ, layout.qkv_strides);
  cudnnBackendDescriptor_t dk = heads(kDK, layout.qkv_strides);
  cudnnBackendDescriptor_t dv = heads(kDV, layout.qkv_strides);
  // Each scalar is one tensor however often it is read: one uid, one descriptor. cudnn_frontend
  // multiplies by a by-value 1 where dropout's scale (and, in the legacy form, its mask) would go;
  // kept so the graph is the pattern cuDNN expects.
  cudnnBackendDescriptor_t scale = graph.scalar(kScale, CUDNN_DATA_FLOAT);
  cudnnBackendDescriptor_t one = graph.scalar(kOne, CUDNN_DATA_FLOAT);

  // rowsum(dO ⊙ O) · 1, one value per query row ("softmax_sum" in cudnn_frontend): virtual in the
  // legacy form, a real (B, NH, T, 1) fp32 tensor in scratch in the current one.
  cudnnBackendDescriptor_t dout_out =
      graph.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, out,
                      graph.virtual_tensor(CUDNN_DATA_FLOAT, layout.heads, layout.out_strides));
  cudnnBackendDescriptor_t row_dot = graph.pointwise(
      CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT,
      graph.reduction(CUDNN_REDUCE_TENSOR_ADD, dout_out, row_values()), one,
      legacy ? row_values()
             : graph.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, layout.rows, layout.rows_strides));

  // P from the forward's stats, then dV = Pᵀ·dO (Pᵀ is P read through swapped strides).
  cudnnBackendDescriptor_t s = masked_scores(graph, layout, q, k_transposed, scale);
  cudnnBackendDescriptor_t p = graph.pointwise(
      CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT,
      graph.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, stats, scores(CUDNN_DATA_FLOAT)),
      scores(CUDNN_DATA_FLOAT));
  graph.matmul(graph.reshape(p, scores_transposed(io)), dout, dv);

  // dS = P ⊙ (dO·Vᵀ [· 1 in the legacy form] - rowsum) · scale.
  cudnnBackendDescriptor_t dp = graph.matmul(dout, v_transposed, scores(CUDNN_DATA_FLOAT));
  if (legacy)
    dp = graph.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp, one, scores(CUDNN_DATA_FLOAT));
  cudnnBackendDescriptor_t ds_unscaled = graph.pointwise(
      CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT,
      graph.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, row_dot, scores(CUDNN_DATA_FLOAT)),
      p, scores(CUDNN_DATA_FLOAT));
  cudnnBackendDescriptor_t ds = graph.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, ds_unscaled,
                                                scale, scores(CUDNN_DATA_FLOAT));

  // dK = dSᵀ·Q.
  graph.matmul(graph.reshape(ds, scores_transposed(io)), q, dk);
  // dQ = dS·K, accumulated in fp32 in scratch (zeroed before each run), then converted into dq:
  // cudnn_frontend's graph without the deterministic option. The legacy form declares the
  // accumulator F16x16-reordered, the current one a plain (B, NH, T, hs) block.
  cudnnBackendDescriptor_t k =
      graph.reshape(k_transposed, graph.virtual_tensor(io, layout.heads, layout.qkv_strides));
  cudnnBackendDescriptor_t dq_accumulator =
      graph.tensor(kDQAccumulator, CUDNN_DATA_FLOAT, layout.heads, layout.packed_heads_strides,
                   legacy ? CUDNN_TENSOR_REORDERING_F16x16 : CUDNN_TENSOR_REORDERING_NONE);
  graph.pointwise(CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, graph.matmul(ds, k, dq_accumulator),
                  dq);
  return graph;
}

// `bytes` rounded up to the arena's alignment.
std::size_t aligned(std::int64_t bytes) {
  const std::size_t alignment = cuda::DeviceArena::kDefaultAlignment;
  return (static_cast<std::size_t>(bytes) + alignment - 1) / alignment * alignment;
}

}  // namespace

const char* backward_form_name(CudnnBackwardForm form) {
  return form == CudnnBackwardForm::legacy ? "legacy" : "current";
}

CudnnAttention::BackwardPlan CudnnAttention::build_backward(cudnnHandle_t handle, int B, int T,
                                                            int C, int NH, AttentionIoType io) {
  const Layouts layout(B, T, C, NH);
  std::string legacy_failure;
  try {
    return {CudnnBackwardForm::legacy,
            build_plan(handle, backward_graph(layout, cudnn_type(io), CudnnBackwardForm::legacy)),
            ""};
  } catch (const Error& rejected) {
    // Nothing has run yet, so any rejection of the legacy graph (no engine, or an attribute the
    // library no longer takes) is worth one retry in the current form.
    legacy_failure = rejected.what();
  }
  try {
    return {CudnnBackwardForm::current,
            build_plan(handle, backward_graph(layout, cudnn_type(io), CudnnBackwardForm::current)),
            legacy_failure};
  } catch (const CudnnUnsupported& unsupported) {
    throw CudnnUnsupported("no cuDNN engine for the attention backward in either form (legacy: " +
                           legacy_failure + "; current: " + unsupported.what() + ")");
  } catch (const Error& failed) {
    throw Error("cuDNN rejected the attention backward in both forms (legacy: " + legacy_failure +
                "; current: " + failed.what() + ")");
  }
}

CudnnAttention::CudnnAttention(int B, int T, int C, int NH, AttentionIoType io, cudaStream_t stream)
    : B_(B),
      T_(T),
      C_(C),
      NH_(NH),
      hs_(C / NH),
      element_bytes_(2),
      scale_(1.0f / std::sqrt(static_cast<float>(C / NH))),
      mask_fill_(std::numeric_limits<float>::lowest()),
      stream_(stream),
      forward_plan_(build_plan(handle_.get(), forward_graph(Layouts(B, T, C, NH), cudnn_type(io)))),
      backward_(build_backward(handle_.get(), B, T, C, NH, io)) {
  STRATA_CUDNN_CHECK(cudnnSetStream(handle_.get(), stream_));
  const std::size_t workspace_bytes =
      aligned(std::max(forward_plan_.workspace_bytes(), backward_.plan.workspace_bytes()));
  const std::size_t accumulator_bytes = aligned(B_ * NH_ * T_ * hs_ * std::int64_t{4});
  const std::size_t softmax_sum_bytes =
      backward_.form == CudnnBackwardForm::current ? aligned(B_ * NH_ * T_ * std::int64_t{4}) : 0;
  scratch_.emplace(workspace_bytes + accumulator_bytes + softmax_sum_bytes);
  workspace_ = workspace_bytes > 0 ? scratch_->allocate(workspace_bytes) : nullptr;
  dq_accumulator_ = static_cast<float*>(scratch_->allocate(accumulator_bytes));
  if (softmax_sum_bytes > 0)
    softmax_sum_ = static_cast<float*>(scratch_->allocate(softmax_sum_bytes));
}

std::size_t CudnnAttention::bind(const CudnnAttentionBuffers& buffers) {
  // cuDNN takes non-const pointers for inputs too; it does not write them.
  char* columns = static_cast<char*>(const_cast<void*>(buffers.qkv));
  char* gradient_columns = static_cast<char*>(buffers.dqkv);
  const std::size_t C_bytes = static_cast<std::size_t>(C_) * element_bytes_;
  forward_packs_.push_back(make_variant_pack({{kQ, columns},
                                              {kKTransposed, columns + C_bytes},
                                              {kV, columns + 2 * C_bytes},
                                              {kOut, buffers.out},
                                              {kStats, buffers.stats},
                                              {kScale, &scale_},
                                              {kMaskFill, &mask_fill_}},
                                             workspace_));
  std::vector<UidPointer> backward_bindings = {{kQ, columns},
                                               {kKTransposed, columns + C_bytes},
                                               {kVTransposed, columns + 2 * C_bytes},
                                               {kOut, buffers.out},
                                               {kDOut, const_cast<void*>(buffers.dout)},
                                               {kStats, buffers.stats},
                                               {kDQ, gradient_columns},
                                               {kDK, gradient_columns + C_bytes},
                                               {kDV, gradient_columns + 2 * C_bytes},
                                               {kDQAccumulator, dq_accumulator_},
                                               {kScale, &scale_},
                                               {kMaskFill, &mask_fill_},
                                               {kOne, &one_}};
  if (backward_.form == CudnnBackwardForm::current)
    backward_bindings.push_back({kSoftmaxSum, softmax_sum_});
  backward_packs_.push_back(make_variant_pack(backward_bindings, workspace_));
  return forward_packs_.size() - 1;
}

void CudnnAttention::forward(std::size_t binding) {
  execute_plan(handle_.get(), forward_plan_, forward_packs_.at(binding));
}

void CudnnAttention::zero_dq_accumulator() {
  STRATA_CUDA_CHECK(cudaMemsetAsync(
      dq_accumulator_, 0, static_cast<std::size_t>(B_ * NH_ * T_ * hs_) * sizeof(float), stream_));
}

void CudnnAttention::backward(std::size_t binding) {
  // The accumulator is summed into across key tiles, so it starts from zero every run.
  // cudnn_frontend memsets it inside execute only for cuDNN before 9.6 (its source says later
  // versions need no memset); the loaded library's version is not known here, so this always
  // zeroes, and `bench attention` reports what that costs (cudnn_dq_zero_ms).
  zero_dq_accumulator();
  execute_plan(handle_.get(), backward_.plan, backward_packs_.at(binding));
}

}  // namespace strata::bench
